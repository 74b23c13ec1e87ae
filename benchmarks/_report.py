"""Shared plumbing for the benchmark scripts: timing, peak memory and writing a section of docs/benchmarks.md."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Callable, List

BENCHMARKS_DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


#: The benchmarks whose blocks are written from committed records. Each has ``report_from_records()`` (reads its
#: record and rewrites its blocks, timing and training nothing) and ``REPORT_BLOCKS``, the (page, block name) pairs
#: it writes; ``python -m experiments report`` calls them all through :func:`report_from_records`.
REPORTED = ("benchmarks.eigenpro", "benchmarks.ika_vs_nystrom", "benchmarks.laplace_neuralef", "benchmarks.lla_rotated_mnist_cost",
            "benchmarks.neuralef_vs_nystrom", "benchmarks.tracing", "benchmarks.twin_training")
#: Blocks of timings whose only record is the block itself: rerunning their benchmark (the command in the marker)
#: measures them anew, so ``python -m experiments report`` leaves them as they are.
MEASURED_ONLY = {("docs/benchmarks.md", name) for name in ("covariances", "dgp_epoch", "prediction", "streaming", "eigenpro_scaling")}


def report_from_records() -> None:
    """Rewrite the blocks of every benchmark in :data:`REPORTED` from its committed record."""
    import importlib

    for name in REPORTED:
        importlib.import_module(name).report_from_records()


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


def write_section(name: str, markdown: str, command: str, doc: Path = BENCHMARKS_DOC) -> None:
    """Replace generated block ``name`` of docs/benchmarks.md (the one block writer,
    :func:`experiments.harness.blocks.write_block`; ``command`` is the command that regenerates it)."""
    from experiments.harness.blocks import write_block

    write_block(doc, name, markdown, command)


def report_block(name: str, markdown: Callable[[dict], str], record: Path, command: str) -> str:
    """Rewrite block ``name`` of docs/benchmarks.md as ``markdown`` of the JSON record at ``record``; the text."""
    import json

    text = markdown(json.loads(Path(record).read_text()))
    write_section(name, text, command)
    return text


def measure_or_report(module: str, description: str, measure: Callable[[], None], report: Callable[[], str]) -> None:
    """The command line of a benchmark with one record: ``python -m <module>`` runs ``measure`` (which writes the
    record) and then ``report``; ``--report-only`` only ``report``s, timing nothing."""
    from experiments.harness.cli import make_parser, shared_option

    parser = make_parser(f"python -m {module}", description)
    shared_option(parser, "--report-only", help="write the block from the record, time nothing")
    if not parser.parse_args().report_only:
        measure()
    print(report())


def import_package(folder, name: str):
    """Import package ``folder/name`` under ``name`` (e.g. an older copy of the library to compare against)
    without putting ``folder`` on the module search path."""
    import importlib.util
    import sys

    init = Path(folder) / name / "__init__.py"
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(init.parent)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
