"""Shared plumbing for the benchmark scripts: timing, peak memory and writing a section of docs/benchmarks.md."""

from __future__ import annotations

import re
import statistics
import time
from pathlib import Path
from typing import Callable, List

BENCHMARKS_DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


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


def write_section(name: str, markdown: str, doc: Path = BENCHMARKS_DOC) -> None:
    """Replace the text between ``<!-- section: name -->`` and ``<!-- end: name -->`` in docs/benchmarks.md."""
    text = doc.read_text()
    pattern = re.compile(rf"(<!-- section: {re.escape(name)} -->\n)(.*?)(<!-- end: {re.escape(name)} -->)", re.S)
    if not pattern.search(text):
        raise ValueError(f"docs/benchmarks.md has no section markers for {name!r}")
    doc.write_text(pattern.sub(lambda m: m.group(1) + markdown.rstrip() + "\n" + m.group(3), text))
