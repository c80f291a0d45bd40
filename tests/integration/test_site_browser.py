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

from bench.advise.picks import shown_tokens
from bench.cli import main
from bench.report.decide_grid import DECIDE_FILE
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


def browse(url: str, tmp_path: Path, *mode: str, window: tuple[int, int] = WINDOW) -> subprocess.CompletedProcess:
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
        f"--window-size={window[0]},{window[1]}",
        # The decision page inflates its data asynchronously: let the page's tasks finish before the dump.
        "--virtual-time-budget=10000",
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
    index = parse(browse(site.as_uri(), tmp_path, "--dump-dom").stdout)
    assert index.find("html", **{"data-ready": "1"}), "the index's script did not run"
    assert [a["href"] for a in index.find("a") if (a.get("href") or "").startswith("hw-")] == [
        "hw-2xA10.html",
        "hw-cpu.html",
    ]
    assert not index.find("table", **{"class": "matrix"}), "the index only links the profiles' pages"
    for hardware in ("2xA10", "cpu"):
        page = parse(browse(site.with_name(f"hw-{hardware}.html").as_uri(), tmp_path, "--dump-dom").stdout)
        assert page.find("html", **{"data-ready": "1"}), "the inline script did not run"
        tables = page.find("table", **{"class": "matrix"})
        assert [t["data-hardware"] for t in tables] == [hardware]
        links = {a["data-cell"] for a in page.find("a") if (a.get("href") or "").startswith(f"#cell-{hardware}-")}
        assert links == set(cell_ids())
        panels = {d["data-cell"] for d in page.find("details", **{"class": "panel"})}
        assert panels == set(cell_ids())
        assert len(page.find("svg", **{"class": "plot scatter"})) == 1
        assert len(page.find("svg", **{"class": "plot winners"})) == 1
        points = [a["id"] for t, a in page.tags if t == "g" and (a.get("id") or "").startswith("point-")]
        assert len(points) == len(set(points)) == 8  # a dot per ok cell
        assert all(p.removeprefix(f"point-{hardware}-") in cell_ids() for p in points)
        assert not page.find("details", **{"class": "panel", "open": ""}), "no panel is open without a fragment"
        assert page.find("a", href="index.html"), "the page links back to the index"


def test_index_is_one_screen_and_a_profile_page_is_one_profile(site, tmp_path):
    _, index, _ = probe(site, "", tmp_path)
    assert index["scrollHeight"] <= WINDOW[1], "the index fits in one window"
    _, cpu, _ = probe(site.with_name("hw-cpu.html"), "", tmp_path)
    assert cpu["scrollHeight"] > WINDOW[1]  # a matrix, plots and 13 panels


def test_fragment_opens_the_cell_panel(site, tmp_path):
    url = site.with_name("hw-cpu.html").as_uri() + "#cell-cpu-one_adapter-none-zero2"
    page = parse(browse(url, tmp_path, "--dump-dom").stdout)
    opened = [d["id"] for d in page.find("details", **{"class": "panel"}) if "open" in d]
    assert opened == ["cell-cpu-one_adapter-none-zero2"]
    assert page.find("a", href=KNOWN_ISSUE), "the panel links the known issue"


def test_screenshot_renders(site, tmp_path):
    shot = tmp_path / "site.png"
    browse(site.with_name("hw-cpu.html").as_uri(), tmp_path, f"--screenshot={shot}")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == WINDOW
    assert len(data) > 20_000, "a page with tables and plots compresses to more than a blank one"


# The decision page: a small grid published for real, read in Chromium, held to `advise`'s own output.
DECIDE_YAML = """methods: {dpo: {}, grpo: {counts: [2], batch_sizes: [1]}}
workloads: [tiny]
models: [qwen2.5-7b]
gpus: [T4, A10]
counts: [1, 2]
max_lengths: [1024, 2048]
batch_sizes: [1, 4]
"""
POINT = {"method": "dpo", "model": "qwen2.5-7b", "gpu": "A10", "count": "2", "length": "2048", "batch": "1"}
ADVISE = ["advise", "--gpu", "A10:2", "--model", "qwen2.5-7b", "--max-length", "2048", "--batch-size", "1"]


def shipped_beside(scenarios: Path) -> None:
    """The shipped scenario folder in place of the test's (the GPU catalog, the models, the workloads and the whole
    matrix, whose 11 columns the page lays out): `--scenarios` is the one folder every reader reads."""
    from bench.paths import SCENARIOS_DIR

    for item in SCENARIOS_DIR.iterdir():
        if item.is_dir():
            if not (scenarios / item.name).exists():
                (scenarios / item.name).symlink_to(item)  # read only
        elif item.name != DECIDE_FILE:
            shutil.copyfile(item, scenarios / item.name)


@pytest.fixture(scope="module")
def decide(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("decide")
    results, scenarios = build_results(root)
    shipped_beside(scenarios)
    (scenarios / "decide.yaml").write_text(DECIDE_YAML, encoding="utf-8")
    assert main(["--results", str(results), "--scenarios", str(scenarios), "publish"]) == 0
    return results / "site" / "decide.html"


def scenarios_of(page: Path) -> Path:
    """The scenario folder the decision page was published from (the fixture's root/scenarios)."""
    return page.parent.parent.parent / "scenarios"


def shown_gb(value: float) -> str:
    """A size as the page shows it: GB, one decimal."""
    return f"{round(value / 1e8) / 10:.1f} GB"


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
    assert main(["--scenarios", str(scenarios_of(decide)), *ADVISE, "--format", "json", "--output", str(out)]) == 0
    capsys.readouterr()
    advice = json.loads(out.read_text(encoding="utf-8"))
    # a row advise folds (launcher variants predicted alike) stands for its alternatives, which the page lays out
    advised = {cell_id: c for c in advice["cells"] for cell_id in (c["cell_id"], *c["alternatives"])}
    assert set(shown) == set(advised)
    for cell_id, cell in advised.items():
        assert shown[cell_id]["data-verdict"] == cell["verdict"], cell_id
        assert shown[cell_id]["data-total"] == shown_gb(cell["total_bytes"]), cell_id
    verdicts = {c["verdict"] for c in advised.values()}
    assert {"fits", "oom"} <= verdicts, "the point shows both colours"
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
    assert_marks_are_ascii(browse(site.with_name("hw-cpu.html").as_uri(), tmp_path, "--dump-dom").stdout)


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


# The decision page's layout, measured in Chromium: a copy of the page with a probe script that runs after the page's
# own (on `load`), optionally clicks a cell, and writes the boxes it measured (document coordinates, CSS px) into
# <body data-probe>, which --dump-dom returns.
PROBE = """<script>
function measure(){
  function box(e){
    if (!e) return null;
    var r = e.getBoundingClientRect();
    return {top: r.top + scrollY, bottom: r.bottom + scrollY, left: r.left + scrollX, right: r.right + scrollX};
  }
  var out = {innerWidth: innerWidth, scrollWidth: document.documentElement.scrollWidth,
             scrollHeight: document.documentElement.scrollHeight};
  var click = %s;
  if (click) {
    var cell = document.querySelector('.dcell[data-cell="' + click + '"]');
    cell.click();
    out.clicked = box(cell);
    var row = cell.closest('tr');
    out.row = box(row);
    out.next_row = box(row.nextElementSibling && row.nextElementSibling.nextElementSibling);
    out.detail = box(document.getElementById('detail'));
  }
  out.answer = box(document.getElementById('answer'));
  out.picks = Array.prototype.map.call(document.querySelectorAll('.pick'), box);
  out.grid = box(document.querySelector('table.decide'));
  out.heads = Array.prototype.map.call(document.querySelectorAll('table.decide thead th'), box);
  out.cells = Array.prototype.map.call(document.querySelectorAll('table.decide tbody td'), box);
  document.body.setAttribute('data-probe', JSON.stringify(out));
}
window.addEventListener('load', function wait(){
  // After the page's own script: it marks <html data-ready> once it rendered.
  if (document.documentElement.getAttribute('data-ready')) measure(); else setTimeout(wait, 20);
});
</script>"""


def probe(page: Path, fragment: str, tmp_path: Path, click: str | None = None, window: tuple[int, int] = WINDOW):
    """(the DOM after the probe ran, what it measured, a screenshot under tmp_path) of `page#fragment`."""
    copy = page.with_name(f"probe-{tmp_path.name}-{page.stem}.html")
    html = page.read_text(encoding="utf-8")
    copy.write_text(html.replace("</body>", PROBE % json.dumps(click) + "</body>"), encoding="utf-8")
    url = copy.as_uri() + fragment
    dom = browse(url, tmp_path, "--dump-dom", window=window).stdout
    shot = tmp_path / f"{page.stem}.png"
    browse(url, tmp_path, f"--screenshot={shot}", window=window)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", data[16:24]) == window
    found = [a["data-probe"] for a in parse(dom).find("body") if a.get("data-probe")]
    assert found, "the probe did not run"
    return parse(dom), json.loads(found[0]), shot


def fragment(point: dict[str, str]) -> str:
    return "#" + "&".join(f"{k}={v}" for k, v in point.items())


def test_decision_page_opens_on_advises_three_picks(decide, tmp_path, capsys):
    page, boxes, _ = probe(decide, fragment(POINT), tmp_path)
    out = tmp_path / "advice.json"
    assert main(["--scenarios", str(scenarios_of(decide)), *ADVISE, "--format", "json", "--output", str(out)]) == 0
    capsys.readouterr()
    advice = json.loads(out.read_text(encoding="utf-8"))
    cells = {c["cell_id"]: c for c in advice["cells"]}
    picks = page.find("article")
    assert [(p["data-kind"], p["data-cell"]) for p in picks] == [(p["kind"], p["cell_id"]) for p in advice["picks"]]
    assert len(picks) == 3
    for pick in picks:
        cell = cells[pick["data-cell"]]
        assert pick["data-total"] == shown_gb(cell["total_bytes"])
        assert pick["data-tokens"] == str(shown_tokens(cell["tokens_per_s"]))
        assert pick["data-mfu"] == str(round(100 * cell["mfu"])), "the MFU beside the tokens/s is advise's"
    page_dom = browse(point_url(decide, POINT), tmp_path, "--dump-dom").stdout
    text = html_text(page_dom)
    for p in advice["picks"]:
        assert p["reason"] in text, "the pick's reason is advise's"
        cell = cells[p["cell_id"]]
        assert shown_gb(cell["range_low_bytes"]) + " – " + shown_gb(cell["range_high_bytes"]) + " PREDICTED" in text
    assert advice["run"]["command"] in text, "the chosen cell's command is on the page"
    figures = [a["data-figure"] for a in parse(page_dom).find("dd")]
    assert figures == ["total", "range", "chance", "host", "tokens"] * 3
    assert text.count(" PREDICTED") >= 12, "every figure of the picks is labelled PREDICTED"
    # The answer is on top: above the grid, within the first screen.
    assert boxes["answer"]["top"] < 300
    assert all(p["bottom"] < boxes["grid"]["top"] for p in boxes["picks"])
    assert max(p["bottom"] for p in boxes["picks"]) < WINDOW[1]


def test_a_click_opens_the_details_right_under_the_cell(decide, tmp_path):
    cell = "one_adapter-none-zero3"
    page, boxes, _ = probe(decide, fragment(POINT), tmp_path, click=cell)
    opened = [d["data-cell"] for d in page.find("div", **{"class": "detail"}) if "data-cell" in d]
    assert opened == [cell], "one cell's details, the clicked one's"
    clicked, detail = boxes["clicked"], boxes["detail"]
    # A taller cell beside it (an offload cell's host line) may make its row taller than the clicked cell.
    assert clicked["bottom"] <= detail["top"] and 0 <= detail["top"] - boxes["row"]["bottom"] < 20, (
        "the details open right below the clicked cell's row"
    )
    assert detail["left"] < clicked["right"] and detail["bottom"] <= boxes["next_row"]["top"]
    assert detail["bottom"] - detail["top"] < 900, "the details fit on a screen"


def test_every_column_is_visible_in_a_1280_px_window(decide, tmp_path):
    narrow = (1280, 900)
    _, boxes, _ = probe(decide, fragment(POINT), tmp_path, window=narrow)
    assert boxes["innerWidth"] == narrow[0]
    assert boxes["scrollWidth"] <= narrow[0], "no horizontal scrolling"
    assert len(boxes["heads"]) == 11 and boxes["cells"]
    for box in boxes["heads"] + boxes["cells"] + boxes["picks"]:
        assert box["left"] >= 0 and box["right"] <= narrow[0], box
    assert boxes["grid"]["right"] <= narrow[0]


@pytest.mark.parametrize(
    ("query", "axis", "value", "nearest"),
    [("?gpu=Z80", "gpu", "Z80", ["A10", "T4"]), ("#count=3&gpu=a10", "count", "3", ["2", "1"])],
)
def test_an_out_of_grid_value_in_the_url_is_named_with_the_nearest_choices(
    decide, tmp_path, query, axis, value, nearest
):
    dom = browse(decide.as_uri() + query, tmp_path, "--dump-dom").stdout
    page = parse(dom)
    assert page.find("html", **{"data-ready": "1"})
    box = page.find("div", id="out-of-grid")
    assert box and "hidden" not in box[0], "the page says so"
    lines = page.find("p", **{"data-axis": axis})
    assert lines and lines[0]["data-value"] == value
    text = html_text(dom)
    assert f"{axis}={value}" in text and "not on this page's grid" in text
    assert "Nearest valid choices: " + ", ".join(nearest) in text
    selected = {a["value"] for a in page.find("option") if "selected" in a}
    assert nearest[0] in selected, "the nearest choice is shown"


def test_the_url_takes_the_gpu_names_the_cli_takes(decide, tmp_path):
    """`--gpu nvidia-a10` names the A10: so does `#gpu=nvidia-a10` (spelling and aliases as the catalog folds them)."""
    page = parse(browse(point_url(decide, POINT | {"gpu": "nvidia-a10"}), tmp_path, "--dump-dom").stdout)
    assert "hidden" in page.find("div", id="out-of-grid")[0]
    assert [a["value"] for a in page.find("option") if "selected" in a] == list(POINT.values())


def test_an_in_grid_url_shows_no_warning(decide, tmp_path):
    page = parse(browse(point_url(decide, POINT), tmp_path, "--dump-dom").stdout)
    assert "hidden" in page.find("div", id="out-of-grid")[0]


class Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.skip = 0

    def handle_starttag(self, tag: str, attrs) -> None:
        self.skip += tag in ("script", "style", "template")

    def handle_endtag(self, tag: str) -> None:
        self.skip -= tag in ("script", "style", "template")

    def handle_data(self, data: str) -> None:
        if not self.skip:
            self.parts.append(data)


def html_text(dom: str) -> str:
    """The page's visible text (scripts, styles and templates left out), whitespace collapsed."""
    text = Text()
    text.feed(dom)
    return re.sub(r"\s+", " ", "".join(text.parts))


# After the page is ready: run an action (pick a method in its select, edit the fragment), let the page follow, then
# report what it shows in <body data-after> (which --dump-dom returns).
ACT = """<script>
window.addEventListener('load', function wait(){
  if (!document.documentElement.getAttribute('data-ready')) { setTimeout(wait, 20); return; }
  (function(){ %s })();
  setTimeout(function(){
    var selected = Array.prototype.map.call(document.querySelectorAll('select'), function(s){ return s.value; });
    var gen = document.getElementById('generation');
    var series = function(id){ return Array.prototype.map.call(
      document.querySelectorAll('#' + id + ' g.series'), function(g){ return g.getAttribute('data-series'); }); };
    document.body.setAttribute('data-after', JSON.stringify({
      hash: location.hash, selected: selected,
      picks: Array.prototype.map.call(document.querySelectorAll('.pick'),
                                      function(p){ return p.getAttribute('data-cell'); }),
      kinds: Array.prototype.map.call(document.querySelectorAll('.pick'),
                                      function(p){ return p.getAttribute('data-kind'); }),
      point: document.querySelector('table.decide').getAttribute('data-point'),
      answer: document.getElementById('answer-for').textContent,
      generation: gen.hidden ? null : gen.textContent,
      memory: series('memory-chart'), speed: series('speed-chart')}));
  }, 300);
});
</script>"""


def after(page: Path, fragment_: str, action: str, tmp_path: Path) -> dict:
    """What the page shows at `page#fragment_` once `action` (JavaScript) ran and the page followed it."""
    copy = page.with_name(f"act-{tmp_path.name}-{page.stem}.html")
    copy.write_text(page.read_text(encoding="utf-8").replace("</body>", ACT % action + "</body>"), encoding="utf-8")
    dom = browse(copy.as_uri() + fragment_, tmp_path, "--dump-dom").stdout
    found = [a["data-after"] for a in parse(dom).find("body") if a.get("data-after")]
    assert found, "the action's report did not run"
    return json.loads(found[0])


def advised(decide: Path, argv: list[str], tmp_path: Path, capsys) -> dict:
    out = tmp_path / "advice.json"
    assert main(["--scenarios", str(scenarios_of(decide)), *argv, "--format", "json", "--output", str(out)]) == 0
    capsys.readouterr()
    return json.loads(out.read_text(encoding="utf-8"))


def chart_series(advice: dict) -> tuple[list[str], set[str]]:
    """What the two charts draw for `advice`: a line per picked setup, a bar per backend with a fitting speed."""
    picked = list(dict.fromkeys(p["cell_id"] for p in advice["picks"]))
    fast = {c["backend"] for c in advice["cells"] if c["verdict"] == "fits" and c["tokens_per_s"] is not None}
    return picked, fast


def test_choosing_a_method_shows_its_picks_generation_and_charts(decide, tmp_path, capsys):
    select = "var s = document.getElementById('method'); s.value = 'grpo'; s.dispatchEvent(new Event('change'));"
    shown = after(decide, fragment(POINT), select, tmp_path)
    assert shown["hash"] == "#" + "&".join(f"{k}={v}" for k, v in (POINT | {"method": "grpo"}).items())
    advice = advised(decide, [*ADVISE, "--method", "grpo"], tmp_path, capsys)
    assert shown["picks"] == [p["cell_id"] for p in advice["picks"]] and shown["picks"]
    assert shown["kinds"] == [p["kind"] for p in advice["picks"]], "each pick's kind by its name, not its place"
    count = "one pick" if len(advice["picks"]) == 1 else f"{len(advice['picks'])} picks"
    assert shown["answer"].startswith(f"advise's {count} for dpo-bench {' '.join(ADVISE)} --method grpo")
    if "fastest" not in shown["kinds"]:
        assert "(no Fastest pick here)" in shown["answer"], "fewer picks are worded as such"
    assert shown["generation"] and "8 completions per prompt" in shown["generation"]
    assert "1,024 tokens" in shown["generation"], "the workload's completion length"
    picked, fast = chart_series(advice)
    assert shown["memory"] == picked and set(shown["speed"]) == fast


def test_editing_the_fragment_is_followed_without_a_reload(decide, tmp_path, capsys):
    """A new fragment (with the CLI's alias `nvidia-t4`) changes the selection, the answer and the charts."""
    moved = POINT | {"gpu": "nvidia-t4", "count": "1"}
    edit = f"location.hash = {json.dumps(fragment(moved))};"
    shown = after(decide, fragment(POINT), edit, tmp_path)
    assert shown["selected"] == list((POINT | {"gpu": "T4", "count": "1"}).values())
    argv = ["advise", "--gpu", "T4:1", *ADVISE[3:]]
    assert shown["point"] == " ".join(argv[1:])
    advice = advised(decide, argv, tmp_path, capsys)
    assert shown["picks"] == [p["cell_id"] for p in advice["picks"]]
    picked, fast = chart_series(advice)
    assert shown["memory"] == picked and set(shown["speed"]) == fast


def test_both_charts_draw_a_series_per_picked_setup_and_per_fast_backend(decide, tmp_path, capsys):
    shown = after(decide, fragment(POINT), "", tmp_path)
    picked, fast = chart_series(advised(decide, ADVISE, tmp_path, capsys))
    assert len(picked) >= 2 and len(fast) >= 2, "a point where the charts have something to show"
    assert shown["memory"] == picked and set(shown["speed"]) == fast
