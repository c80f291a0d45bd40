"""Renders the published site in headless Chromium: screenshot + the DOM after its inline JS ran.

Needs the Debian package `chromium` (apt-get install -y chromium); without it these tests fail, on purpose.
"""

import json
import re
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
EMOJI = re.compile("[\u2600-\u27bf\U0001f000-\U0001faff]")


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
    points = [a["id"] for t, a in page.tags if t == "g" and (a.get("id") or "").startswith("point-")]
    assert len(points) == len(set(points)) == 16  # a dot per ok cell, 8 per profile
    assert all(p.removeprefix("point-").split("-", 1)[1] in cell_ids() for p in points)
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


# The decision page: a small grid published for real, read in Chromium, held to `advise`'s own output.
DECIDE_YAML = """workloads: [tiny]
models: [qwen2.5-7b]
gpus: [T4, A10]
counts: [1, 2]
max_lengths: [1024, 2048]
batch_sizes: [1, 4]
"""
POINT = {"model": "qwen2.5-7b", "gpu": "A10", "count": "2", "length": "2048", "batch": "1"}
ADVISE = ["advise", "--gpu", "A10:2", "--model", "qwen2.5-7b", "--max-length", "2048", "--batch-size", "1"]


@pytest.fixture(scope="module")
def decide(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("decide")
    results, scenarios = build_results(root)
    (scenarios / "decide.yaml").write_text(DECIDE_YAML, encoding="utf-8")
    assert main(["--results", str(results), "--scenarios", str(scenarios), "publish"]) == 0
    return results / "site" / "decide.html"


def point_url(page: Path, point: dict[str, str]) -> str:
    return page.as_uri() + "#" + "&".join(f"{k}={v}" for k, v in point.items())


def test_index_links_the_decision_page(decide, tmp_path):
    page = parse(browse((decide.parent / "index.html").as_uri(), tmp_path, "--dump-dom").stdout)
    assert page.find("a", href="decide.html")


def test_decision_page_shows_the_verdicts_advise_gives(decide, tmp_path, capsys):
    dom = browse(point_url(decide, POINT), tmp_path, "--dump-dom").stdout
    page = parse(dom)
    assert page.find("html", **{"data-ready": "1"}), "the page's script did not run"
    selected = [a["value"] for a in page.find("option") if "selected" in a]
    assert selected == list(POINT.values()), "the selects show the point of the URL"
    shown = {
        a["data-cell"]: a
        for a in page.find("span")
        if "dcell" in (a.get("class") or "").split() and a.get("data-verdict") != "not_applicable"
    }
    out = tmp_path / "advice.json"
    assert main([*ADVISE, "--format", "json", "--output", str(out)]) == 0
    capsys.readouterr()
    advice = json.loads(out.read_text(encoding="utf-8"))
    advised = {c["cell_id"]: c for c in advice["cells"]}
    assert set(shown) == set(advised)
    for cell_id, cell in advised.items():
        assert shown[cell_id]["data-verdict"] == cell["verdict"], cell_id
        assert int(shown[cell_id]["data-total-mb"]) == round(cell["total_bytes"] / 1e6), cell_id
    verdicts = {c["verdict"] for c in advised.values()}
    assert {"fits", "predicted_oom"} <= verdicts, "the point shows both colours"
    table = page.find("table", **{"class": "matrix decide"})
    assert table and table[0]["data-point"] == " ".join(ADVISE[1:])


def test_decision_page_screenshot_is_drawn_without_tofu(decide, tmp_path):
    shot = tmp_path / "decide.png"
    browse(point_url(decide, POINT), tmp_path, f"--screenshot={shot}")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == WINDOW
    assert len(data) > 50_000, "a matrix of coloured cells compresses to more than a blank page"
    # Tofu: without an emoji font Chromium draws an emoji as a box. Every mark on the page is plain ASCII text on a
    # coloured background, which every font has a glyph for.
    page = parse(browse(point_url(decide, POINT), tmp_path, "--dump-dom").stdout)
    assert page.find("span", **{"class": "badge v-fits"}), "the fitting cells carry a FITS badge"
    assert_marks_are_ascii(browse(point_url(decide, POINT), tmp_path, "--dump-dom").stdout)


def test_measured_site_marks_are_text_not_emoji(site, tmp_path):
    assert_marks_are_ascii(browse(site.as_uri(), tmp_path, "--dump-dom").stdout)


class Marks(HTMLParser):
    """The text of every element whose class names a mark (`mark`, `badge`)."""

    def __init__(self) -> None:
        super().__init__()
        self.open: list[bool] = []
        self.texts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = (dict(attrs).get("class") or "").split()
        self.open.append(bool({"mark", "badge"} & set(classes)))

    def handle_endtag(self, tag: str) -> None:
        if self.open:
            self.open.pop()

    def handle_data(self, data: str) -> None:
        if any(self.open) and data.strip():
            self.texts.append(data.strip())


def assert_marks_are_ascii(dom: str) -> None:
    marks = Marks()
    marks.feed(dom)
    assert len(marks.texts) > 10, "the page has marks"
    drawn_as_boxes = sorted({t for t in marks.texts if not t.isascii()})
    assert not drawn_as_boxes, f"marks that need an emoji font: {drawn_as_boxes[:5]}"
    assert not EMOJI.search(dom), "no emoji anywhere on the page"
