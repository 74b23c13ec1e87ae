"""Deprecated aliases: old public names kept importable for one release, each emitting a DeprecationWarning
that names its new home. A leaf module (imports nothing from the package), so every module can use it."""

from __future__ import annotations

import importlib
import warnings
from typing import Callable, Dict, Tuple


def deprecated_aliases(module_name: str, aliases: Dict[str, Tuple[str, str]]) -> Callable[[str], object]:
    """A module-level ``__getattr__`` (PEP 562) for ``module_name`` resolving each old name in ``aliases``
    (``old -> (new module, new name)``) to the object now at ``new module.new name``, with a
    ``DeprecationWarning`` "``module_name.old`` is deprecated; use ``new module.new name``"; any other name is
    an AttributeError, as for an ordinary module."""

    def __getattr__(name: str):
        if name not in aliases:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        home, new_name = aliases[name]
        warnings.warn(f"{module_name}.{name} is deprecated; use {home}.{new_name}", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(home), new_name)

    return __getattr__
