"""Where the data live: the directory a user names (``--data-dir``) or ``$ADGP_DATA_DIR``. A leaf module, so the
data loaders (:mod:`.uci`, :mod:`.mnist`) and the package's ``__init__`` can all import it without a cycle."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Union

DATA_DIR_VARIABLE = "ADGP_DATA_DIR"


def resolve_data_dir(data_dir: Optional[Union[str, os.PathLike]] = None, subdirectory: Optional[str] = None) -> Path:
    """The data directory: ``data_dir`` if given, else ``$ADGP_DATA_DIR``; with ``subdirectory`` appended.

    Raises ``FileNotFoundError`` naming the path and where it came from when it does not exist, and
    ``ValueError`` when neither source names one.
    """
    if data_dir is not None:
        root, source = Path(data_dir), "the data_dir argument"
    elif os.environ.get(DATA_DIR_VARIABLE):
        root, source = Path(os.environ[DATA_DIR_VARIABLE]), f"${DATA_DIR_VARIABLE}"
    else:
        raise ValueError(f"no data directory given: pass --data-dir / data_dir=... or set ${DATA_DIR_VARIABLE}")
    path = root / subdirectory if subdirectory else root
    if not path.is_dir():
        raise FileNotFoundError(f"data directory {str(path)!r} (from {source}) does not exist")
    return path
