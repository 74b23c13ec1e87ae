"""Shared plumbing for the benchmark scripts: timing, peak memory, their records and writing a section of the
benchmark pages (docs/benchmarks.md and its topic pages docs/benchmarks_*.md) from a record."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
import statistics
import sys
import time
from typing import Callable, List, Optional

from experiments.harness.artifacts import atomic_write_text
from experiments.harness.blocks import write_block
from experiments.harness.cli import make_parser, shared_option

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BENCHMARKS_DOC = DOCS / "benchmarks.md"
#: The page of each benchmark block: docs/benchmarks.md is the overview, the topic pages hold the rest.
SECTION_PAGES = {
    "covariances": DOCS / "benchmarks.md",
    "dgp_epoch": DOCS / "benchmarks_training.md",
    "tracing": DOCS / "benchmarks_training.md",
    "prediction": DOCS / "benchmarks_prediction.md",
    "prediction-vs-keras": DOCS / "benchmarks_prediction.md",
    "prediction-cnn-vs-keras": DOCS / "benchmarks_prediction.md",
    "prediction-memory": DOCS / "benchmarks_prediction.md",
    "streaming": DOCS / "benchmarks_prediction.md",
    "laplace_neuralef_cache": DOCS / "benchmarks_kernels.md",
    "lla_rotated_mnist_cost": DOCS / "benchmarks_kernels.md",
    "eigenpro_scaling": DOCS / "benchmarks_kernels.md",
    "neuralef": DOCS / "benchmarks_neuralef.md",
    "neuralef_quiet": DOCS / "benchmarks_neuralef.md",
}


def time_call(fn: Callable[[], object], repeats: int = 10, warmup: int = 2) -> List[float]:
    """Wall-clock seconds of ``repeats`` calls of ``fn`` after ``warmup`` untimed calls (compilation, caches)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def median(times: List[float]) -> float:
    return statistics.median(times)


def section_page(name: str) -> Path:
    """The benchmark page that holds block ``name`` (:data:`SECTION_PAGES`; docs/benchmarks.md for others)."""
    return SECTION_PAGES.get(name, BENCHMARKS_DOC)


def write_section(name: str, markdown: str, command: str, doc: Optional[Path] = None) -> None:
    """Replace generated block ``name`` of its benchmark page, ``doc`` or :func:`section_page` (the one block writer,
    :func:`experiments.harness.blocks.write_block`; ``command`` is the command that regenerates it)."""
    write_block(section_page(name) if doc is None else doc, name, markdown, command)


def machine_state() -> dict:
    """The fields of a record that say what its measurement ran on: ``cpus`` (``os.cpu_count()``) and the
    1/5/15-min load average now (``load_average_1_5_15``; taken when the measurement ends)."""
    return {"cpus": os.cpu_count(), "load_average_1_5_15": [round(v, 2) for v in os.getloadavg()]}


def write_record(path: Path, record: dict) -> None:
    """Write a JSON record atomically (an interrupted write leaves the previous file)."""
    atomic_write_text(path, json.dumps(record, indent=1) + "\n")


def command_line(command: str, values: dict, defaults: dict) -> str:
    """``command`` with the options of a run whose values differ from their defaults, as typed (``batch_size`` is
    ``--batch-size``, a list is space-separated): the command a record names."""
    def typed(value) -> str:
        return " ".join(map(str, value)) if isinstance(value, (list, tuple)) else f"{value:g}" if isinstance(value, float) else str(value)

    return command + "".join(f" --{name.replace('_', '-')} {typed(value)}" for name, value in values.items() if value != defaults[name])


def shown_path(path: Path) -> str:
    """``path`` as the docs name it: relative to the repository when it lies inside it."""
    path = Path(path).resolve()
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def record_line(path: Path, command: str) -> str:
    """The sentence of a block that names its record and the command that made it."""
    return f"Record: `{shown_path(path)}` (made by `{command}`)."


def load_average_line(record: dict) -> str:
    """A block's line of the machine's load when the record's measurement ended (:func:`machine_state`)."""
    return f"- 1/5/15-min load average at the end: {record['load_average_1_5_15']} on {record['cpus']} cores.\n"


def report_block(name: str, markdown: Callable[[dict], str], record: Path, command: str,
                 made_by: Optional[str] = None) -> str:
    """Rewrite block ``name`` of its benchmark page (:func:`section_page`) as ``markdown`` of the JSON record at ``record``; the text.
    Where the record does not exist yet, the block is left as it is, a one-line notice naming ``made_by``, the
    command that measures it (default: ``command`` without ``--report-only``), is printed, and the text is empty."""
    if not Path(record).exists():
        print(f"{shown_path(record)}: no record yet; run {made_by or command.replace(' --report-only', '')}")
        return ""
    text = markdown(json.loads(Path(record).read_text()))
    write_section(name, text, command)
    return text


def measure_or_report(module: str, description: str, measure: Callable, report: Callable[[], str],
                      options: Optional[Callable] = None, markdown: Optional[Callable[[dict], str]] = None,
                      record: Optional[Path] = None) -> None:
    """The command line of a benchmark with one record: ``python -m <module>`` runs ``measure`` (which writes the
    record) and then ``report``; ``--report-only`` only ``report``s, timing nothing.

    A benchmark with options of its own passes ``options(parser)`` (declaring them), its ``markdown(record)`` and its
    ``record`` path; the command line then also has ``--no-write``. ``measure(args, output)`` measures with the
    parsed arguments, writes its record to ``output`` (None under ``--no-write``: nothing is written) and returns the
    record, whose block is then printed instead of the report; text it returns instead (a partial run that is no
    record) is printed as it is."""
    parser = make_parser(f"python -m {module}", description)
    shared_option(parser, "--report-only", help="write the block from the record, time nothing")
    if options is not None:
        options(parser)
        parser.add_argument("--no-write", action="store_true", help="print the block without writing the record or docs/benchmarks.md")
    args = parser.parse_args()
    shown = None
    if not args.report_only:
        if options is None:
            measure()
        else:
            result = measure(args, None if args.no_write else record)
            shown = result if isinstance(result, str) else markdown(result) if args.no_write else None
    shown = report() if shown is None else shown
    if shown:  # empty: the block had no record, report_block said so
        print(shown)


def import_package(folder, name: str):
    """Import package ``folder/name`` under ``name`` (e.g. an older copy of the library to compare against)
    without putting ``folder`` on the module search path."""
    init = Path(folder) / name / "__init__.py"
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(init.parent)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
