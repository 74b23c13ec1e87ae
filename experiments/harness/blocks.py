"""Generated blocks in Markdown pages: the one writer used by the studies and the benchmarks.

A page may hold text written by hand and blocks written by a program. A block is delimited by

    <!-- BEGIN GENERATED name: command -->
    ...
    <!-- END GENERATED name -->

where ``name`` tells blocks of one page apart and ``command`` is the command that rewrites the block (so a reader
knows how to regenerate it). :func:`write_block` replaces the block's body (creating the block at the end of the
page when it is missing and ``create`` is set) and leaves everything outside it alone. Standard library only, so
benchmark scripts can import it without importing any study.
"""

from __future__ import annotations

import re
from pathlib import Path

from experiments.harness.artifacts import atomic_write_text


def _pattern(name: str) -> re.Pattern:
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", name):
        raise ValueError(f"block name {name!r} must be letters, digits, '_', '.', '-'")
    return re.compile(rf"<!-- BEGIN GENERATED {re.escape(name)}: (?P<command>[^\n]*?) -->\n(?P<body>.*?)"
                      rf"<!-- END GENERATED {re.escape(name)} -->", re.S)


def render_block(name: str, command: str, markdown: str) -> str:
    return f"<!-- BEGIN GENERATED {name}: {command} -->\n{markdown.rstrip()}\n<!-- END GENERATED {name} -->"


def without_commands(text: str) -> str:
    """``text`` with the command of every block marker left out (to compare pages written from other paths)."""
    return re.sub(r"(<!-- BEGIN GENERATED [A-Za-z0-9_.\-]+: )[^\n]*?( -->)", r"\1\2", text)


def read_block(doc, name: str) -> str:
    """The body of block ``name`` in ``doc`` (ValueError when the page has no such block)."""
    match = _pattern(name).search(Path(doc).read_text())
    if match is None:
        raise ValueError(f"{doc} has no generated block {name!r}")
    return match.group("body")


def write_block(doc, name: str, markdown: str, command: str, create: bool = False) -> bool:
    """Put ``markdown`` into block ``name`` of ``doc``; returns whether the file changed (unchanged files are not
    rewritten, so regenerating from the same records leaves ``git status`` clean)."""
    doc = Path(doc)
    text = doc.read_text() if doc.exists() else ""
    block = render_block(name, command, markdown)
    pattern = _pattern(name)
    if len(pattern.findall(text)) > 1:
        raise ValueError(f"{doc} has more than one generated block {name!r}")
    if pattern.search(text):
        new = pattern.sub(lambda _: block, text)
    elif create:
        new = f"{text.rstrip()}\n\n{block}\n" if text.strip() else f"{block}\n"
    else:
        raise ValueError(f"{doc} has no generated block {name!r} (markers <!-- BEGIN GENERATED {name}: ... -->)")
    if new == text:
        return False
    atomic_write_text(doc, new)
    return True
