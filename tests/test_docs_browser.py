"""The built docs site, opened page by page in a real browser (headless Chromium).

The site is the strict build of tests/conftest.py's ``built_site`` (shared with test_tutorials.py), served on
127.0.0.1 by Python's http.server. Every page of mkdocs.yml's nav is fetched over HTTP (it must answer 200) and
opened in Chromium, whose DOM after loading (``--dump-dom``) must hold main content text, internal links that resolve
to files of the built site, images whose files exist and are not empty, and, on a tutorial page, rendered output
cells.

Without Chromium the test skips, except where ``ADGP_REQUIRE_BROWSER=1`` (set by .ci/run, which installs Debian's
``chromium``): there a missing browser is a failure."""

import functools
import http.server
import os
import shutil
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pytest

from test_docs_pages import nav_pages

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")
OUTPUT_CELL = "jp-OutputArea-output"  # mkdocs-jupyter's class of a rendered output


def _browser() -> str:
    found = next((path for name in BROWSERS if (path := shutil.which(name))), None)
    if found is None:
        message = f"no headless browser on PATH (tried {', '.join(BROWSERS)}); Debian: apt-get install chromium"
        if os.environ.get("ADGP_REQUIRE_BROWSER") == "1":
            pytest.fail(message + " (ADGP_REQUIRE_BROWSER=1: CI must run this check)")
        pytest.skip(message)
    return found


class _Page(HTMLParser):
    """What the checks read from a dumped DOM: hrefs, image sources, the text inside <main>/<article>, classes."""

    def __init__(self):
        super().__init__()
        self.hrefs, self.images, self.classes, self.main_text, self._depth = [], [], set(), [], 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.classes.update((attrs.get("class") or "").split())
        if tag == "a" and attrs.get("href"):
            self.hrefs.append(attrs["href"])
        if tag == "img":
            self.images.append(attrs.get("src") or "")
        if tag in ("main", "article"):
            self._depth += 1

    def handle_endtag(self, tag):
        if tag in ("main", "article") and self._depth:
            self._depth -= 1

    def handle_data(self, data):
        if self._depth and data.strip():
            self.main_text.append(data.strip())


def _site_file(site: Path, page_url: str, reference: str):
    """The file of the built site an internal ``reference`` on ``page_url`` points to; None for an external one."""
    url = urllib.parse.urlparse(urllib.parse.urljoin(page_url, reference))
    if url.scheme not in ("http", "https") or url.netloc != urllib.parse.urlparse(page_url).netloc:
        return None
    target = site / urllib.parse.unquote(url.path).lstrip("/")
    return target / "index.html" if target.is_dir() or url.path.endswith("/") else target


@pytest.fixture(scope="module")
def served_site(built_site):
    returncode, output, site = built_site
    assert returncode == 0, output
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield site, f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _dump_dom(browser: str, url: str, profile: Path) -> str:
    run = subprocess.run([browser, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", url],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, f"{browser} failed on {url}: {run.stderr[-1500:]}"
    return run.stdout


def _page_url(base: str, page: str) -> str:
    """The site URL mkdocs gives nav page ``page`` (use_directory_urls)."""
    stem = page.rsplit(".", 1)[0]
    if stem == "index" or stem.endswith("/index"):
        return base + stem[: -len("index")]
    return base + stem + "/"


def test_every_nav_page_opens_in_a_browser_with_content_links_images_and_outputs(served_site, tmp_path):
    browser = _browser()
    site, base = served_site
    pages = nav_pages()
    assert len(pages) > 20
    problems = []
    for page in pages:
        url = _page_url(base, page)
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                status = response.status
        except urllib.error.HTTPError as error:
            status = error.code
        if status != 200:
            problems.append(f"{page}: HTTP {status} at {url}")
            continue
        dom = _page(_dump_dom(browser, url, tmp_path / "profile"))
        if len(" ".join(dom.main_text)) < 40:
            problems.append(f"{page}: no main content text")
        for href in dom.hrefs:
            target = _site_file(site, url, href)
            if target is not None and not target.is_file():
                problems.append(f"{page}: broken link {href}")
        for src in dom.images:
            if src.startswith("data:image/"):
                if len(src) < 100:
                    problems.append(f"{page}: empty inline image")
                continue
            target = _site_file(site, url, src)
            if target is None or not target.is_file() or target.stat().st_size == 0:
                problems.append(f"{page}: image {src!r} does not load")
        if page.startswith("tutorials/") and OUTPUT_CELL not in dom.classes:
            problems.append(f"{page}: no rendered output cell")
    assert not problems, "\n".join(problems)


def _page(dom: str) -> _Page:
    parsed = _Page()
    parsed.feed(dom)
    return parsed


def test_the_checks_catch_a_broken_link_a_missing_image_and_an_empty_page(tmp_path):
    site = tmp_path / "site"
    (site / "a").mkdir(parents=True)
    (site / "a" / "index.html").write_text("x")
    (site / "img.png").write_bytes(b"")
    base = "http://127.0.0.1:8000/a/"
    assert _site_file(site, base, "../a/").is_file()
    assert not _site_file(site, base, "../b/").is_file()
    assert _site_file(site, base, "https://example.org/") is None
    assert _site_file(site, base, "../img.png").stat().st_size == 0
    parsed = _page('<html><body><nav><a href="../b/">b</a></nav><main><p>Text of the page.</p>'
                   '<img src="../img.png"><div class="jp-OutputArea-output">1</div></main></body></html>')
    assert parsed.hrefs == ["../b/"] and parsed.images == ["../img.png"] and OUTPUT_CELL in parsed.classes
    assert parsed.main_text == ["Text of the page.", "1"]
    assert _page_url("http://h/", "index.md") == "http://h/" and _page_url("http://h/", "howto/index.md") == "http://h/howto/"
    assert _page_url("http://h/", "results/uci.md") == "http://h/results/uci/"
    assert _page_url("http://h/", "tutorials/x.ipynb") == "http://h/tutorials/x/"
