"""The docs speak to a user: no tracker numbers, no notes on how the work went, no machine's paths; and every results
page (docs/results/*.md and the benchmark pages) is short enough to read (≤ 200 lines) and reachable from the site's
navigation (mkdocs.yml's nav).

Fast checks of the committed text (no build): the built site itself is opened in a browser by test_docs_browser.py."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: text a reader of the docs should never meet: a tracker's issue number, a work session, a machine's data or home folder
FORBIDDEN = re.compile(r"issues? ?#?[0-9]+|(?<![\w.])session|\.\./shared|(?<![\w.])/(?:work|home|root|Users)/", re.I)  # not Keras' clear_session
#: what the site shows or includes: pages, tutorial scripts and notebooks, example scripts and their printed lines
#: (the records under docs/results/ are data: their command fields keep the command as it was run)
PROSE = {".md", ".py", ".ipynb", ".txt"}
MAX_RESULTS_LINES = 200


class _ConfigLoader(yaml.SafeLoader):
    """mkdocs.yml's YAML, its mkdocs-specific tags (``!relative``, ``!ENV``) read as nothing."""


_ConfigLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


def nav_pages(config: Path = ROOT / "mkdocs.yml") -> list:
    """The pages (paths relative to docs/) of mkdocs.yml's nav, nested sections included, in order."""

    def walk(entry):
        if isinstance(entry, str):
            yield entry
        elif isinstance(entry, dict):
            for value in entry.values():
                yield from walk(value)
        elif isinstance(entry, list):
            for item in entry:
                yield from walk(item)

    nav = yaml.load(config.read_text(), Loader=_ConfigLoader)["nav"]
    return [page for page in walk(nav) if not re.match(r"[a-z]+://", page)]


def _prose_files() -> list:
    files = [p for p in DOCS.rglob("*") if p.is_file() and p.suffix in PROSE and "_tools" not in p.parts]
    return sorted(files) + [ROOT / "README.md", ROOT / "CHANGELOG.md"]


def test_nav_pages_parse_nested_sections(tmp_path):
    config = tmp_path / "mkdocs.yml"
    config.write_text("site_name: x\nplugins:\n  - a:\n      base_path: [!relative $config_dir]\n"
                      "nav:\n  - Home: index.md\n  - R:\n      - A: results/a.md\n      - S:\n          - B: results/b.md\n"
                      "  - Ext: https://example.org\n")
    assert nav_pages(config) == ["index.md", "results/a.md", "results/b.md"]


def test_docs_name_no_issue_session_or_machine_path():
    hits = []
    for path in _prose_files():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            hits += [f"{path.relative_to(ROOT)}:{number}: {match.group(0)!r}" for match in FORBIDDEN.finditer(line)]
    assert not hits, f"{len(hits)} hits (write to a user: what, the number, the command):\n" + "\n".join(hits[:60])


def test_forbidden_pattern_catches_what_it_should():
    for text in ("(issue 32)", "issues 4, 16", "Issue #36's targets", "the ninth session", "--data-dir ../shared/data",
                 "/" + "home/someone/repo/docs"):  # built from parts: the pattern a machine path has, naming no machine
        assert FORBIDDEN.search(text), text
    for text in ("--data-dir $ADGP_DATA_DIR", "see the protocol history", "protocol v6", "tf_keras.backend.clear_session()"):
        assert not FORBIDDEN.search(text), text


def test_every_results_page_is_short_and_in_the_nav():
    listed = set(nav_pages())
    # the results pages; the tables a study writes beside its records (results/<run>/table.md) are data, left out of
    # the site by mkdocs.yml's exclude_docs
    pages = sorted(p.relative_to(DOCS).as_posix() for p in (DOCS / "results").glob("*.md"))
    pages += ["benchmarks.md"] + sorted(p.name for p in DOCS.glob("benchmarks_*.md"))
    long = {page: n for page in pages if (n := len((DOCS / page).read_text().splitlines())) > MAX_RESULTS_LINES}
    assert not long, f"results pages over {MAX_RESULTS_LINES} lines (split them by question): {long}"
    missing = [page for page in pages if page not in listed]
    assert not missing, f"results pages not in mkdocs.yml's nav: {missing}"


def test_every_nav_page_exists():
    absent = [page for page in nav_pages() if not (DOCS / page).is_file()]
    assert not absent, absent
