"""Generated blocks in Markdown pages: the one writer used by the studies and the benchmarks.

A page may hold text written by hand and blocks written by a program. A block is delimited by

    <!-- BEGIN GENERATED name: command -->
    ...
    <!-- END GENERATED name -->

where ``name`` tells blocks of one page apart and ``command`` is the command that rewrites the block (so a reader
knows how to regenerate it). A block names no machine's data folder: the folder a quoted command gives ``--data-dir``
is written ``$ADGP_DATA_DIR``, in the command and in the paths the block shows (:func:`portable_data_dir`).
:func:`write_block` replaces the block's body (creating the block at the end of the
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


_DATA_DIR = re.compile(r"--data-dir[ =](?P<folder>[^\s`'\")]+)")


def portable_data_dir(*texts: str) -> list:
    """``texts`` with every data folder they name (the argument of a ``--data-dir`` in any of them) written as
    ``$ADGP_DATA_DIR``, there and wherever a path starts with it, e.g. ``--data-dir ../data`` and
    ``../data/mnist/t10k.gz`` become ``--data-dir $ADGP_DATA_DIR`` and ``$ADGP_DATA_DIR/mnist/t10k.gz``."""
    folders = {match.group("folder").rstrip("/") for text in texts for match in _DATA_DIR.finditer(text)}
    for folder in sorted(folders - {"$ADGP_DATA_DIR", ""}, key=len, reverse=True):
        at_path = re.compile(rf"(?<![\w./$-]){re.escape(folder)}(?=/|[\s`'\"),;]|$)", re.M)
        texts = [at_path.sub(lambda _: "$ADGP_DATA_DIR", text) for text in texts]
    return list(texts)


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
    command, markdown = portable_data_dir(command, markdown)
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


def write_block_from_record(doc, name: str, markdown, record, command: str) -> str:
    """Rewrite block ``name`` of ``doc`` as ``markdown(the JSON record at record)``; the text, or "" (nothing written)
    while the record does not exist yet. For a study's diagnosis that keeps one JSON record beside its page."""
    import json

    if not Path(record).is_file():
        return ""
    text = markdown(json.loads(Path(record).read_text()))
    write_block(doc, name, text, command)
    return text

