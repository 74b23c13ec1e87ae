"""The one command line of the studies: shared options declared once, each study adding its own through a hook.

``python -m experiments <study> [options]`` and ``python -m experiments.<study> [options]`` both end here.
"""

from __future__ import annotations

import argparse
from pathlib import Path
import sys
from types import ModuleType
from typing import Optional, Sequence

from experiments.harness.store import portable_command
from experiments.harness.study import check_study, page_path, run_study


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
    options.report_command = report_command(name, study, options)
    return options


def report_runs(study: ModuleType) -> list:
    """The argument lists ``python -m experiments report`` runs ``study`` with (after ``--report-only``): its
    ``REPORT_RUNS`` (one per page, when it has several), else ``[REPORT_ARGS]`` (default ``[[]]``); none when its
    ``REPORTS`` is false."""
    if not getattr(study, "REPORTS", True):
        return []
    return [list(extra) for extra in getattr(study, "REPORT_RUNS", [getattr(study, "REPORT_ARGS", [])])]


def report_page(options) -> Path:
    """The page a run writes: its ``--doc`` or ``--page`` when the study has one, else ``<out>.md``."""
    for flag in ("doc", "page"):
        if getattr(options, flag, None):
            return Path(getattr(options, flag))
    return page_path(options)


def report_pages(name: str, study: ModuleType) -> list:
    """The pages ``python -m experiments report`` writes for ``study``, one per report run."""
    parser = study_parser(name, study)
    return [report_page(parser.parse_args(["--report-only", *extra])) for extra in report_runs(study)]


def report_command(name: str, study: ModuleType, options) -> str:
    """The command that rewrites the page of ``options``' run from its records alone, for the page's generated-block
    marker: ``python -m experiments <name> --report-only`` with the arguments of the report run that writes the same
    page from the same ``--out`` (:func:`report_runs`), else with ``--out`` and, when not ``<out>.md``, the page."""
    parser, page = study_parser(name, study), report_page(options)
    for extra in report_runs(study):
        run = parser.parse_args(["--report-only", *extra])
        if report_page(run) == page and Path(run.out) == Path(options.out):
            return command_line(name, ["--report-only", *extra])
    fallback = ["--out", Path(options.out).as_posix()] + (["--doc", page.as_posix()] if page != page_path(options) else [])
    return command_line(name, ["--report-only", *fallback])


def command_line(name: str, argv: Sequence[str]) -> str:
    """The command to quote in a page, without the paths of the machine that ran it."""
    return portable_command("experiments", [name, *argv])


def main(name: str, study: ModuleType, argv: Optional[Sequence[str]] = None) -> list:
    check_study(study)
    return run_study(study, parse(name, study, argv))


