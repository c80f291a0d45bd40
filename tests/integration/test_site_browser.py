"""Renders the published site in headless Chromium: screenshot + the DOM after its inline JS ran.

Needs the Debian package `chromium` (apt-get install -y chromium); without it these tests fail, on purpose.
"""

import shutil
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from bench.cli import main
from tests.unit.report.test_publish import KNOWN_ISSUE, build_results, cell_ids

pytestmark = pytest.mark.integration

WINDOW = (1400, 1800)


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and Path("/usr/bin/chromium").is_file():
        found = "/usr/bin/chromium"
    if found is None:
        pytest.fail("chromium is not installed: run `apt-get install -y chromium` (Debian package) to run this test")
    return found


def browse(url: str, tmp_path: Path, *mode: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"chromium-profile-{len(list(tmp_path.glob('chromium-profile-*')))}"
    argv = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        *mode,
        url,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"chromium failed ({done.returncode}): {done.stderr[-2000:]}"
    return done


class Elements(HTMLParser):
    """Every start tag with its attributes, in document order."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def find(self, tag: str, **attrs: str) -> list[dict[str, str | None]]:
        return [a for t, a in self.tags if t == tag and all(a.get(k) == v for k, v in attrs.items())]


def parse(dom: str) -> Elements:
    parser = Elements()
    parser.feed(dom)
    return parser


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("site")
    results, scenarios = build_results(root)
    assert main(["--results", str(results), "--scenarios", str(scenarios), "publish"]) == 0
    return results / "site" / "index.html"


def test_dom_after_load_has_matrices_cells_and_plots(site, tmp_path):
    dom = browse(site.as_uri(), tmp_path, "--dump-dom").stdout
    page = parse(dom)
    assert page.find("html", **{"data-ready": "1"}), "the inline script did not run"
    tables = page.find("table", **{"class": "matrix"})
    assert [t["data-hardware"] for t in tables] == ["2xA10", "cpu"]
    for hardware in ("2xA10", "cpu"):
        links = {a["data-cell"] for a in page.find("a") if (a.get("href") or "").startswith(f"#cell-{hardware}-")}
        assert links == set(cell_ids())
        panels = {
            d["data-cell"]
            for d in page.find("details", **{"class": "panel"})
            if d["id"].startswith(f"cell-{hardware}-")
        }
        assert panels == set(cell_ids())
    assert len(page.find("svg", **{"class": "plot scatter"})) == 2
    assert len(page.find("svg", **{"class": "plot winners"})) == 2
    assert len(page.find("circle", **{"class": "point"})) == 16
    assert not page.find("details", **{"class": "panel", "open": ""}), "no panel is open without a fragment"


def test_fragment_opens_the_cell_panel(site, tmp_path):
    url = site.as_uri() + "#cell-cpu-one_adapter-none-zero2"
    page = parse(browse(url, tmp_path, "--dump-dom").stdout)
    opened = [d["id"] for d in page.find("details", **{"class": "panel"}) if "open" in d]
    assert opened == ["cell-cpu-one_adapter-none-zero2"]
    assert page.find("a", href=KNOWN_ISSUE), "the panel links the known issue"


def test_screenshot_renders(site, tmp_path):
    shot = tmp_path / "site.png"
    browse(site.as_uri(), tmp_path, f"--screenshot={shot}")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == WINDOW
    assert len(data) > 20_000, "a page with tables and plots compresses to more than a blank one"
