"""The one command line of the studies: shared options declared once, each study adding its own through a hook.

``python -m experiments <study> [options]`` and ``python -m experiments.<study> [options]`` both end here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import ModuleType
from typing import Optional, Sequence

from experiments.harness.study import check_study, run_study


def make_parser(prog: str, description: Optional[str] = None) -> argparse.ArgumentParser:
    """The parser every study and benchmark starts from (the only ``ArgumentParser`` of experiments/)."""
    return argparse.ArgumentParser(prog=prog, description=description,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


#: The options every study shares, declared here once (scripts that are not studies, e.g. benchmarks, take them from here too).
SHARED_OPTIONS = {
    "--data-dir": dict(default=None, help="data folder (default $ADGP_DATA_DIR; resolved by activated_dgp.data.resolve_data_dir)"),
    "--report-only": dict(action="store_true", help="write the pages from the records; run nothing"),
    "--seed": dict(type=int, default=0, help="random seed"),
    "--quiet": dict(action="store_true", help="no progress lines"),
}


def shared_option(parser, flag: str, **overrides) -> None:
    """Declare shared option ``flag`` (see :data:`SHARED_OPTIONS`) on ``parser``, ``overrides`` replacing settings."""
    if flag not in SHARED_OPTIONS:
        raise ValueError(f"{flag!r} is not a shared option; known: {sorted(SHARED_OPTIONS)}")
    parser.add_argument(flag, **{**SHARED_OPTIONS[flag], **overrides})


def study_parser(name: str, study: ModuleType) -> argparse.ArgumentParser:
    parser = make_parser(f"python -m experiments {name}", study.__doc__)
    shared = parser.add_argument_group("shared options")
    shared_option(shared, "--data-dir")
    shared.add_argument("--out", type=Path, default=Path(getattr(study, "OUT", Path("docs") / "results" / name)),
                        help="folder of the study's records (records.jsonl); its page is <out>.md (default %(default)s)")
    shared.add_argument("--artifacts", type=Path, default=None,
                        help="cache of trained networks/DGPs (default .cache/experiments/<out name>)")
    for flag in ("--report-only", "--seed", "--quiet"):
        shared_option(shared, flag)
    if hasattr(study, "add_options"):
        study.add_options(parser.add_argument_group(f"{name} options"))
    return parser


def parse(name: str, study: ModuleType, argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    argv = list(sys.argv[1:] if argv is None else argv)
    options = study_parser(name, study).parse_args(argv)
    options.study = name
    options.command = command_line(name, argv)
    return options


def command_line(name: str, argv: Sequence[str]) -> str:
    """The command to quote in a page, without the paths of the machine that ran it."""
    from experiments.harness.store import portable_command

    return portable_command("experiments", [name, *argv])


def main(name: str, study: ModuleType, argv: Optional[Sequence[str]] = None) -> list:
    check_study(study)
    return run_study(study, parse(name, study, argv))


