"""The built docs site, opened page by page in a real browser (headless Chromium).

The site is the strict build of tests/conftest.py's ``built_site`` (shared with test_tutorials.py), served on
127.0.0.1 by Python's http.server. Every page of mkdocs.yml's nav must answer HTTP 200 and, once loaded in Chromium,
have main content text, internal links that resolve to files of the built site (and to an anchor of the page where
they name one), images the browser decoded (and whose files are not empty) and, on a tutorial page, rendered output cells.

One Chromium process serves every page: it is driven over the DevTools protocol on a pipe
(``--remote-debugging-pipe``: JSON messages ending in a NUL byte on file descriptors 3 and 4), so no WebSocket
client or browser-automation package is needed.

Without Chromium the tests skip, except where ``ADGP_REQUIRE_BROWSER=1`` (set by .ci/run, which installs Debian's
``chromium``): there a missing browser is a failure."""

import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pytest

from test_docs_pages import FORBIDDEN, nav_pages

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         # the site is local: every other host fails at once (the theme asks for web fonts it can do without)
         "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1")
OUTPUT_CELL = "jp-OutputArea-output"  # mkdocs-jupyter's class of a rendered output
#: what the checks read from a loaded page, evaluated in the page: resolved link targets, each image's source and
#: whether the browser decoded it, the text of the main content, and the number of rendered notebook outputs
PAGE_FACTS = f"""JSON.stringify({{
  links: Array.from(document.querySelectorAll("a[href]"), a => a.href),
  images: Array.from(document.images, i => [i.currentSrc || i.src, i.complete && i.naturalWidth > 0]),
  text: (document.querySelector("main article") || document.querySelector("main") || document.body).innerText,
  outputs: document.getElementsByClassName("{OUTPUT_CELL}").length,
}})"""


def _browser() -> str:
    found = next((path for name in BROWSERS if (path := shutil.which(name))), None)
    if found is None:
        message = f"no headless browser on PATH (tried {', '.join(BROWSERS)}); Debian: apt-get install chromium"
        if os.environ.get("ADGP_REQUIRE_BROWSER") == "1":
            pytest.fail(message + " (ADGP_REQUIRE_BROWSER=1: CI must run this check)")
        pytest.skip(message)
    return found


class Chromium:
    """A headless Chromium driven over the DevTools protocol on a pipe: :meth:`facts` loads a URL in one tab and
    returns :data:`PAGE_FACTS` of it."""

    def __init__(self, executable: str, profile: Path, timeout: float = 60.0):
        commands_read, self._commands = os.pipe()
        self._replies, replies_write = os.pipe()

        def descriptors():  # in the child: the protocol's fds 3 (commands in) and 4 (replies out), inheritable
            read_end, write_end = os.dup(commands_read), os.dup(replies_write)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)

        self._process = subprocess.Popen([executable, *FLAGS, "--remote-debugging-pipe", f"--user-data-dir={profile}",
                                          "about:blank"], preexec_fn=descriptors, close_fds=False,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        os.close(commands_read)
        os.close(replies_write)
        self._buffer, self._id, self._timeout = b"", 0, timeout
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.call("Page.enable", session=True)

    def _read(self) -> dict:
        while b"\0" not in self._buffer:
            chunk = os.read(self._replies, 1 << 16)
            if not chunk:
                raise RuntimeError(f"Chromium closed its DevTools pipe: {self._process.stderr.read()[-1500:]!r}")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, params=None, session: bool = False) -> dict:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self._session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        while (reply := self._read()).get("id") != self._id:
            pass  # events in between
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply["result"]

    def facts(self, url: str) -> dict:
        navigation = self.call("Page.navigate", {"url": url}, session=True)
        if navigation.get("errorText"):
            raise RuntimeError(f"{url}: {navigation['errorText']}")
        while not (self._read().get("method") == "Page.loadEventFired"):
            pass
        value = self.call("Runtime.evaluate", {"expression": PAGE_FACTS, "returnByValue": True}, session=True)
        return json.loads(value["result"]["value"])

    def close(self) -> None:
        try:
            self.call("Browser.close")
            self._process.wait(timeout=10)
        except (RuntimeError, OSError, subprocess.TimeoutExpired):
            self._process.kill()
            self._process.wait()
        os.close(self._commands)
        os.close(self._replies)
        self._process.stderr.close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _serve(folder: Path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def _site_file(site: Path, page_url: str, reference: str):
    """The file of the built site an internal ``reference`` on ``page_url`` points to; None for an external one."""
    url = urllib.parse.urlparse(urllib.parse.urljoin(page_url, reference))
    if url.scheme not in ("http", "https") or url.netloc != urllib.parse.urlparse(page_url).netloc:
        return None
    target = site / urllib.parse.unquote(url.path).lstrip("/")
    return target / "index.html" if target.is_dir() or url.path.endswith("/") else target


def _page_url(base: str, page: str) -> str:
    """The site URL mkdocs gives nav page ``page`` (use_directory_urls)."""
    stem = page.rsplit(".", 1)[0]
    if stem == "index" or stem.endswith("/index"):
        return base + stem[: -len("index")]
    return base + stem + "/"


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


@functools.lru_cache(maxsize=None)
def _anchors(path: Path) -> frozenset:
    """The element ids of a built HTML page (the anchors a link can name)."""
    return frozenset(re.findall(r"""\bid=["']?([^"'\s>]+)""", path.read_text()))


def _problems(browser: Chromium, site: Path, url: str, page: str) -> list:
    """What is wrong with ``page`` at ``url`` as the browser shows it (an empty list when nothing is)."""
    if (status := _status(url)) != 200:
        return [f"{page}: HTTP {status} at {url}"]
    facts, problems = browser.facts(url), []
    if len(facts["text"].split()) < 5:
        problems.append(f"{page}: no main content text")
    for link in facts["links"]:
        target = _site_file(site, url, link)
        if target is not None and not target.is_file():
            problems.append(f"{page}: broken link {link}")
        elif target is not None and target.suffix == ".html" and (anchor := urllib.parse.urlparse(link).fragment):
            if urllib.parse.unquote(anchor) not in _anchors(target):
                problems.append(f"{page}: link {link} names an anchor its page does not have")
    for source, decoded in facts["images"]:
        target = None if source.startswith("data:") else _site_file(site, url, source)
        empty = target is not None and (not target.is_file() or target.stat().st_size == 0)
        if not decoded or empty:
            problems.append(f"{page}: image {source[:80]!r} does not load")
    if page.startswith("tutorials/") and facts["outputs"] == 0:
        problems.append(f"{page}: no rendered output cell")
    return problems


@pytest.fixture(scope="module")
def chromium(tmp_path_factory):
    browser = Chromium(_browser(), tmp_path_factory.mktemp("chromium-profile"))
    yield browser
    browser.close()


def test_every_nav_page_opens_in_a_browser_with_content_links_images_and_outputs(built_site, chromium):
    returncode, output, site = built_site
    assert returncode == 0, output
    server, base = _serve(site)
    try:
        pages = nav_pages()
        assert len(pages) > 20 and any(page.startswith("tutorials/") for page in pages)
        problems = [problem for page in pages for problem in _problems(chromium, site, _page_url(base, page), page)]
    finally:
        server.shutdown()
        server.server_close()
    assert not problems, "\n".join(problems)


def test_the_checks_catch_an_error_an_empty_page_a_broken_link_or_anchor_a_missing_image_and_a_bare_tutorial(
        tmp_path, chromium):
    """A hand-made site with one fault per page: each must be reported, and the sound page not at all."""
    site = tmp_path / "site"
    text = "<p>Some words of main content on this page.</p>"
    pages = {
        "good": f'<main id="top">{text}<a href="../empty/">x</a><img src="../pixel.gif"></main>',
        "empty": "<main></main>",
        "link": f'<main>{text}<a href="../nowhere/">x</a><a href="../good/#top">y</a><a href="../good/#gone">z</a></main>',
        "image": f'<main>{text}<img src="../missing.png"></main>',
        "tutorials/notebook": f"<main>{text}</main>",
    }
    for name, body in pages.items():
        (site / name).mkdir(parents=True)
        (site / name / "index.html").write_text(f"<!doctype html><html><body>{body}</body></html>")
    (site / "pixel.gif").write_bytes(bytes.fromhex("47494638396101000100800000ffffff00000021f90401000000002c00000000"
                                                   "010001000002024401003b"))
    server, base = _serve(site)
    try:
        found = {name: _problems(chromium, site, base + name + "/", name) for name in [*pages, "absent"]}
    finally:
        server.shutdown()
        server.server_close()
    assert found["good"] == []
    assert found["empty"] == ["empty: no main content text"]
    assert found["link"] == [f"link: broken link {base}nowhere/",
                             f"link: link {base}good/#gone names an anchor its page does not have"]
    assert found["image"] == [f"image: image '{base}missing.png' does not load"]
    assert found["tutorials/notebook"] == ["tutorials/notebook: no rendered output cell"]
    assert found["absent"] == [f"absent: HTTP 404 at {base}absent/"]


class _Text(HTMLParser):
    """The text a reader sees in an HTML page: everything outside <script> and <style>."""

    def __init__(self):
        super().__init__()
        self.parts, self._hidden = [], 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self._hidden += 1

    def handle_endtag(self, tag):
        if tag in ("script", "style") and self._hidden:
            self._hidden -= 1

    def handle_data(self, data):
        if not self._hidden:
            self.parts.append(data)


def test_the_built_site_names_no_issue_session_or_machine_path(built_site):
    """What test_docs_pages.py checks in the sources, in what the site shows: the API pages' docstrings included."""
    returncode, output, site = built_site
    assert returncode == 0, output
    hits = []
    for page in sorted(site.rglob("*.html")):
        parser = _Text()
        parser.feed(page.read_text())
        text = " ".join(parser.parts)
        hits += [f"{page.relative_to(site)}: {text[max(0, m.start() - 40):m.end() + 20]!r}" for m in FORBIDDEN.finditer(text)]
    assert not hits, "\n".join(hits[:40])


def test_page_urls_and_site_files():
    site = Path("/site")
    assert _page_url("http://h/", "index.md") == "http://h/" and _page_url("http://h/", "howto/index.md") == "http://h/howto/"
    assert _page_url("http://h/", "results/uci.md") == "http://h/results/uci/"
    assert _page_url("http://h/", "tutorials/x.ipynb") == "http://h/tutorials/x/"
    assert _site_file(site, "http://h/a/", "../b/#top") == site / "b" / "index.html"
    assert _site_file(site, "http://h/a/", "../f.png") == site / "f.png"
    assert _site_file(site, "http://h/a/", "https://example.org/") is None
    assert _site_file(site, "http://h/a/", "mailto:x@example.org") is None
