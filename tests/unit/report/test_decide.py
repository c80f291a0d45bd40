"""The decision page's data is `advise`'s: for a few points, the encoded verdicts, totals, margins, terms, tokens/s
with their MFU and commands read back equal what `python -m bench advise --format json` prints."""

import base64
import copy
import dataclasses
import functools
import json
import re
import shutil
import subprocess

import pytest

from bench.advise.picks import shown_tokens
from bench.cli import main
from bench.matrix.gpus import load_catalog
from bench.paths import SCENARIOS_DIR
from bench.report.decide_data import (
    PACKED,
    DecisionPageJob,
    encode,
    point_flags,
    point_index,
    predict_grid,
    read_point,
    speed_text,
    unpack,
)
from bench.report.decide_grid import DECIDE_FILE, DecisionGrid, MethodAxes, ModelChoice, advise_question, load_grid
from bench.report.decide_page import DATA_FILE, data_script, render_page
from bench.report.decide_point import advise_point

GRID = DecisionGrid(
    models=(ModelChoice("tiny", "--workload"), ModelChoice("qwen2.5-7b", "--model")),
    gpus=("T4", "A10", "L4"),
    counts=(1, 2),
    max_lengths=(1024, 2048),
    batch_sizes=(1, 4),
    methods=(MethodAxes("dpo", (1, 2), (1024, 2048), (1, 4)), MethodAxes("grpo", (2,), (1024, 2048), (1,))),
)
"""DPO over the whole small grid, GRPO over a coarser part of it (as scenarios/decide.yaml does)."""
POINTS = [
    (GRID.models[1], "A10", 2, 2048, 1),
    (GRID.models[1], "T4", 1, 1024, 4),
    (GRID.models[0], "A10", 1, 2048, 4),
    (GRID.models[1], "L4", 2, 2048, 1),
    (GRID.models[1], "A10", 2, 2048, 1, "grpo"),
    (GRID.models[0], "L4", 2, 1024, 1, "grpo"),
]
VERDICT_POINTS = [*POINTS, (GRID.models[1], "L4", 1, 1024, 4), (GRID.models[0], "T4", 2, 1024, 1)]
"""Cards with (T4, A10) and without (L4) a catalog host figure, both models, offload cells included."""
EMOJI = re.compile("[\u2600-\u27bf\U0001f000-\U0001faff\ufe0f]")


@pytest.fixture(scope="module")
def predicted() -> tuple[list, dict]:
    return predict_grid(DecisionPageJob(GRID, advise_point))


@pytest.fixture(scope="module")
def data(predicted) -> dict:
    return encode(GRID, *predicted)


def _argv(point: tuple) -> list[str]:
    """advise's flags for a grid point (`--method` where it is not DPO)."""
    question = advise_question(*point)
    return [*question.target.flags(), *([] if question.method == "dpo" else ["--method", question.method])]


def _advise(capsys, tmp_path, argv: list[str]) -> dict:
    out = tmp_path / "advice.json"
    assert main(["advise", *argv, "--format", "json", "--output", str(out)]) == 0
    capsys.readouterr()
    return json.loads(out.read_text(encoding="utf-8"))


@pytest.mark.parametrize("point", POINTS, ids=lambda p: "-".join(str(x) for x in (p[0].name, *p[1:])))
def test_page_data_equals_advise(data, point, capsys, tmp_path):
    """Sizes as the page shows them (GB, one decimal), tokens/s, the picks and their reasons: advise's."""
    model, gpu, count, length, batch, *method = point
    advice = _advise(capsys, tmp_path, _argv(point))
    page = read_point(data, point_index(data, model.name, gpu, count, length, batch, *method))
    advised = {i: c for c in advice["cells"] for i in (c["cell_id"], *c["alternatives"])}  # a row and its variants
    shown = {cid: c for cid, c in page["cells"].items() if c["verdict"] != "not_applicable"}
    assert set(shown) == set(advised)
    assert sum(c["verdict"] == "not_applicable" for c in page["cells"].values()) == advice["not_applicable"]
    shown_gb = functools.partial(pytest.approx, abs=0.051)
    for cell_id, cell in advised.items():
        on_page = shown[cell_id]
        assert on_page["verdict"] == cell["verdict"], cell_id
        assert on_page["total"] == shown_gb(cell["total_bytes"] / 1e9), cell_id
        assert on_page["low"] == shown_gb(cell["range_low_bytes"] / 1e9), cell_id
        assert on_page["high"] == shown_gb(cell["range_high_bytes"] / 1e9), cell_id
        assert on_page["margin"] == pytest.approx(cell["margin_bytes"] / 1e9, abs=0.101), cell_id
        assert on_page["host"] == shown_gb(cell["host_need_bytes"] / 1e9), cell_id
        assert on_page["host_unchecked"] == cell["host_unchecked"], cell_id
        assert on_page["fit_percent"] == round(100 * cell["fit_probability"]), cell_id
        assert on_page["terms"] == {k: shown_gb(v / 1e9) for k, v in cell["terms"].items()}, cell_id
        if cell["verdict"] == "fits":
            speed = cell["tokens_per_s"]  # none where the speed model has no figure (GRPO's sampling)
            assert on_page["tokens_per_s"] == (None if speed is None else shown_tokens(speed)), cell_id
            mfu = cell["mfu"]  # advise's table shows it as f"{mfu:.0%}"
            assert (on_page["mfu_percent"] is None) == (mfu is None), cell_id
            assert mfu is None or f"{on_page['mfu_percent']}%" == f"{mfu:.0%}", cell_id
    picks = [{"kind": p["kind"], "cell_id": p["cell_id"], "reason": p["reason"]} for p in advice["picks"]]
    assert [{k: p[k] for k in ("kind", "cell_id", "reason")} for p in page["picks"]] == picks
    for pick in page["picks"]:  # where the reason names a tokens/s, the page shows its MFU after it
        mfu = page["cells"][pick["cell_id"]]["mfu_percent"]
        named = "PREDICTED tokens/s" in pick["reason"] and mfu is not None
        assert pick["shown"] == pick["reason"] + (f" · MFU {mfu}%" if named else "")
    run = advice["run"]
    if advice["chosen"] is not None:
        assert page["cells"][advice["chosen"]]["command"] == run["command"]


def test_a_point_where_something_fits_has_the_three_picks(data, capsys, tmp_path):
    page = read_point(data, point_index(data, "qwen2.5-7b", "A10", 2, 2048, 1))
    assert [p["kind"] for p in page["picks"]] == ["fastest", "fewest-gpus", "faithful"]
    assert all("PREDICTED tokens/s" in p["reason"] and "@" not in p["reason"] for p in page["picks"])


def test_every_point_is_where_the_page_looks_for_it(data):
    points = list(GRID.points())
    assert len(points) == len(data["points"]) == GRID.size() == 2 * 3 * (2 * 2 * 2 + 1 * 2 * 1)
    for at, point in enumerate(points):
        model, gpu, count, length, batch, method = point
        assert point_index(data, model.name, gpu, count, length, batch, method) == at
        assert point_flags(data, at) == " ".join(advise_question(*point).target.flags())


def test_a_point_that_runs_out_of_memory_is_shown_so(data):
    """Qwen2.5-7B with two full models on one T4 cannot fit: the page must not say it does."""
    page = read_point(data, point_index(data, "qwen2.5-7b", "T4", 1, 2048, 4))["cells"]
    assert page["two_models-none-single"]["verdict"] == "oom"
    assert page["two_models-none-single"]["margin"] < 0
    assert page["one_adapter-none-ddp"]["verdict"] == "not_applicable"


def test_shipped_grid_covers_every_workload_model_and_catalog_gpu():
    grid = load_grid(SCENARIOS_DIR / DECIDE_FILE)
    assert grid is not None
    workloads = {p.stem for p in (SCENARIOS_DIR / "workloads").glob("*.yaml")}
    models = {p.parent.name for p in (SCENARIOS_DIR / "models").glob("*/config.json")}
    assert {m.name for m in grid.models if m.flag == "--workload"} == workloads
    assert {m.name for m in grid.models if m.flag == "--model"} == models
    assert set(grid.gpus) == {g.name for g in load_catalog().gpus}
    assert grid.counts == (1, 2, 4, 8)
    assert [m.method for m in grid.parts()] == ["dpo", "grpo"], "GRPO is on the page"


def test_page_names_its_data_and_uses_no_emoji(data):
    page = render_page(GRID, data)
    assert f'src="{DATA_FILE}"' in page and "PREDICTED" in page
    assert not EMOJI.search(page)
    assert "low-margin" not in page  # the estimator's own likely_* verdicts, no shading of the page's
    script = data_script(data)
    assert script.startswith("window.DECIDE=") and "</" not in script


def test_processes_give_the_same_data(data):
    points, commands = predict_grid(DecisionPageJob(GRID, advise_point, jobs=2))
    assert encode(GRID, points, commands) == data


def test_offload_over_the_nodes_host_memory_is_shown_host_oom(data, capsys, tmp_path):
    """One T4 of an AWS g4dn.12xlarge (192 GiB for 4) has 48 GB of host memory: full DPO of Qwen2.5-7B offloaded to
    it does not fit there, whatever the device says; the page says so as `advise` does, and its legend explains it."""
    point = (GRID.models[1], "T4", 1, 1024, 4)
    page = read_point(data, point_index(data, "qwen2.5-7b", "T4", 1, 1024, 4))["cells"]
    over = {cid for cid, c in page.items() if c["verdict"] == "host_oom"}
    assert over and all(page[cid]["host"] > 48 for cid in over)
    advice = _advise(capsys, tmp_path, _argv(point))
    assert over == {c["cell_id"] for c in advice["cells"] if c["verdict"] == "host_oom"}
    assert ">HOST OOM</span>" in render_page(GRID, data)


def test_the_data_file_is_packed_the_same_every_time_and_reads_back(data):
    """No time stamp anywhere (the gzip header's is zero): an unchanged grid gives the same bytes."""
    script = data_script(data)
    assert script == data_script(copy.deepcopy(data))
    shipped = json.loads(script.removeprefix("window.DECIDE=").removesuffix(";\n"))
    assert set(shipped) & set(PACKED) == set() and shipped["packed"]
    assert unpack(shipped) == json.loads(json.dumps(data))
    assert not re.search(r"20\d\d-\d\d-\d\d", script)
    assert base64.b85decode(shipped["packed"])[4:8] == b"\0\0\0\0", "the gzip header carries no time"


def test_progress_lines_count_the_points_and_say_what_is_left():
    import io

    from bench.report.progress_line import ProgressLine

    now = [100.0]
    out = io.StringIO()
    progress = ProgressLine("decision page, tiny", 100, every_s=5, clock=lambda: now[0], out=out)
    for done in range(1, 101):
        now[0] += 0.5  # 0.5 s a point: a line every 10 points
        progress.advanced(done)
    lines = out.getvalue().splitlines()
    assert len(lines) == 10, lines
    assert lines[0] == "decision page, tiny: 10/100 points, 0.50 s each, about 45 s left"
    assert lines[-2] == "decision page, tiny: 90/100 points, 0.50 s each, about 5 s left"
    assert lines[-1] == "decision page, tiny: 100 points in 50 s (0.50 s each)"


def test_predicting_the_grid_says_how_far_it_is(capsys):
    """publish predicted 7,344 points (over 10 min) without a line: each model's points now report their progress."""
    dpo = dataclasses.replace(GRID, methods=())
    points, _ = predict_grid(DecisionPageJob(dpo, advise_point, progress_every_s=0))
    err = capsys.readouterr().err.splitlines()
    per_model = dpo.size() // 2
    assert err[0] == f"decision page: predicting {dpo.size()} points (2 models, 1 process)", err
    assert f"decision page, tiny: 1/{per_model} points, " in err[1] and "left" in err[1], err
    models = [line.split(":")[0] for line in err[1:]]
    assert models == ["decision page, tiny"] * per_model + ["decision page, qwen2.5-7b"] * per_model
    assert err[per_model].startswith(f"decision page, tiny: {per_model} points in ") and len(points) == dpo.size()


def _markdown_rows(text: str) -> dict[str, tuple[str, str, str]]:
    """cell id -> (verdict, host column, tokens/s column) of advise's Markdown table."""
    rows = [line.split(" | ") for line in text.splitlines() if re.match(r"^\| \d+ \| ", line)]
    return {r[1].split(" (same: ")[0]: (r[4], r[7], r[8]) for r in rows}


@pytest.mark.parametrize("point", VERDICT_POINTS, ids=lambda p: "-".join(str(x) for x in (p[0].name, *p[1:])))
def test_cli_json_markdown_and_page_give_one_verdict(data, point, capsys, tmp_path):
    """The same point asked three ways has one verdict per cell, one host column and one tokens/s with its MFU:
    advise's JSON, its Markdown (the verdict's label, the host column with its `host unchecked` mark, the tokens/s
    column of a fitting cell) and the page's data."""
    from bench.advise.render import VERDICT_LABELS

    flags = _argv(point)
    advised = {c["cell_id"]: c for c in _advise(capsys, tmp_path, flags)["cells"]}
    assert main(["advise", *flags, "--top", "0"]) == 0
    markdown = _markdown_rows(capsys.readouterr().out)
    page = read_point(data, point_index(data, point[0].name, *point[1:]))["cells"]
    for cell_id, cell in advised.items():
        verdict, host, speed = markdown[cell_id]
        assert verdict.split(" (")[0] == VERDICT_LABELS[cell["verdict"]], cell_id
        assert page[cell_id]["verdict"] == cell["verdict"], cell_id
        assert ("host unchecked" in host) == cell["host_unchecked"] == page[cell_id]["host_unchecked"], cell_id
        assert page[cell_id]["host_column"] == host.replace("**", ""), cell_id  # the CLI's column, as the page has it
        if cell["verdict"] == "fits":
            assert speed_text(page[cell_id]["tokens_per_s"], page[cell_id]["mfu_percent"]) == speed, cell_id
    if point[1] == "L4" and any(c["host_bytes"] for c in advised.values()):
        assert any(c["host_unchecked"] for c in advised.values())


@pytest.mark.parametrize("method", ["sft", "kto", "orpo"])
def test_an_unlisted_host_answers_for_each_method(method, capsys, tmp_path):
    """RTX-4090 has no catalog node: every method answers, offload cells host unchecked and never host_oom."""
    advice = _advise(capsys, tmp_path, ["--model", "qwen2.5-7b", "--gpu", "RTX-4090:2", "--method", method])
    offload = [c for c in advice["cells"] if c["host_bytes"]]
    assert all(c["host_unchecked"] and c["verdict"] != "host_oom" for c in offload)


def test_the_page_takes_every_gpu_name_the_cli_takes():
    from bench.report.decide_page import gpu_names

    names = gpu_names(dataclasses.replace(GRID, gpus=("RTX-4090", "RTX-6000-Ada")))
    assert names["4090"] == names["rtx4090"] == "RTX-4090" and names["a6000ada"] == "RTX-6000-Ada"


def test_a_pick_is_read_by_its_kind_not_its_place(data):
    """A point with fewer picks (no fastest: on B200 one kind may be missing) keeps each pick's own kind."""
    points, commands = predict_grid(DecisionPageJob(dataclasses.replace(GRID, gpus=("A10",), methods=()), advise_point))
    at = next(i for i, p in enumerate(points) if len(p.picks) == 3)
    points[at] = dataclasses.replace(points[at], picks=points[at].picks[1:])
    short = encode(dataclasses.replace(GRID, gpus=("A10",), methods=()), points, commands)
    assert [p["kind"] for p in read_point(short, at)["picks"]] == [k for k, _, _ in points[at].picks]
    assert [p["kind"] for p in read_point(short, at)["picks"]] == ["fewest-gpus", "faithful"]


def test_an_online_method_shows_the_workloads_generation_settings(data):
    from bench.advise.target import resolve_target

    for model in GRID.models:
        point = (model, "A10", 2, 2048, 1, "grpo")
        _, workload = resolve_target(advise_question(*point).target)
        g = workload.generation
        shown = read_point(data, point_index(data, model.name, "A10", 2, 2048, 1, "grpo"))["generation"]
        assert shown == {
            "num_generations": g.num_generations,
            "completion_length": g.max_completion_length,
            "prompt_length": g.prompt_length,
        }
    assert read_point(data, point_index(data, "tiny", "A10", 2, 2048, 1))["generation"] is None


def test_each_method_lays_out_its_own_cells(data):
    by_name = {m["name"]: m for m in data["methods"]}
    assert list(by_name) == ["dpo", "grpo"] and by_name["grpo"]["title"] == "GRPO"
    for name, part in by_name.items():
        laid = [i for _, row in part["rows"] for i in row if i is not None] + part["variants"]
        assert laid and {data["cells"][i]["method"] for i in laid} == {name}
    assert by_name["grpo"]["offset"] == sum(1 for _ in GRID.points(GRID.methods[0]))


def test_the_grid_file_takes_each_methods_own_axes(tmp_path):
    (tmp_path / "decide.yaml").write_text(
        "methods: {dpo: {}, grpo: {batch_sizes: [1], max_lengths: [2048]}}\n"
        "workloads: [tiny]\nmodels: []\ngpus: [A10]\ncounts: [1, 2]\nmax_lengths: [1024, 2048]\nbatch_sizes: [1, 4]\n",
        encoding="utf-8",
    )
    grid = load_grid(tmp_path / "decide.yaml")
    assert grid is not None
    assert [(m.method, m.counts, m.max_lengths, m.batch_sizes) for m in grid.parts()] == [
        ("dpo", (1, 2), (1024, 2048), (1, 4)),
        ("grpo", (1, 2), (2048,), (1,)),
    ]
    assert grid.size() == 8 + 2


def test_the_grid_file_names_an_unknown_method(tmp_path):
    from bench.errors import BenchError

    (tmp_path / "decide.yaml").write_text(
        "methods: {ppo: {}}\nworkloads: [tiny]\nmodels: []\ngpus: [A10]\ncounts: [1]\nmax_lengths: [1024]\n"
        "batch_sizes: [1]\n",
        encoding="utf-8",
    )
    with pytest.raises((BenchError, ValueError), match="ppo"):
        load_grid(tmp_path / "decide.yaml")


SITE = SCENARIOS_DIR.parent / "results" / "site"
SIZES = re.compile(r"`([\w.-]+\.(?:js|html))` ([\d,.]+) (bytes|kB|MB)")


def test_the_published_data_file_is_under_its_ceiling():
    from bench.report.decide_page import DATA_FILE_CEILING

    size = (SITE / DATA_FILE).stat().st_size
    assert size <= DATA_FILE_CEILING, (
        f"{DATA_FILE} is {size:,} bytes, over {DATA_FILE_CEILING:,}: give a method a coarser part of "
        "scenarios/decide.yaml (its own counts, max_lengths, batch_sizes)"
    )


def test_the_docs_state_the_sizes_the_build_wrote():
    """docs/advise.md's sentence of sizes names each file with its size as results/site has it."""
    docs = (SCENARIOS_DIR.parent / "docs" / "advise.md").read_text(encoding="utf-8")
    paragraph = docs[docs.index("The sizes the build writes") :].split("\n\n")[0]
    stated = SIZES.findall(paragraph)
    assert {name for name, _, _ in stated} >= {DATA_FILE, "decide.html", "index.html"}, paragraph
    for name, value, unit in stated:
        size = (SITE / name).stat().st_size
        built = {"bytes": f"{size:,}", "kB": f"{size / 1e3:.0f}", "MB": f"{size / 1e6:.1f}"}[unit]
        assert value == built, f"docs/advise.md says `{name}` {value} {unit}; results/site has {built} {unit}"


def test_every_fitting_cells_mfu_is_advises_whole_percent(predicted, data):
    """At every point of the grid the page's MFU (computed from the shown tokens/s, a rate and the peak, with the
    point's fixes) is advise's `mfu` to a whole percent; some need a fix (the shown tokens/s is rounded)."""
    from bench.report.decide_mfu import advised_percent

    points, _ = predicted
    checked = 0
    for at, point in enumerate(points):
        for cell_id, cell in read_point(data, at)["cells"].items():
            if cell["verdict"] == "fits":
                assert cell["mfu_percent"] == advised_percent(point.mfus.get(cell_id)), (at, cell_id)
                checked += cell["mfu_percent"] is not None
    assert checked > 100
    assert all(len(p[8]) % 2 == 0 for p in data["points"])


def test_a_fix_gives_advises_percent_where_the_shown_tokens_round_otherwise():
    from bench.report.decide_mfu import corrections, page_percent, read_percent

    row, peak = ["0", [0.5]], 100.0
    assert page_percent(1_000, 0.5, peak) == 500  # 1,000 tokens/s x 0.5 TFLOP each over 100 TFLOP/s
    fixes = corrections([(0, 1_000, 499), (0, 1_000, 500), (0, 1_000, None)], row, peak)
    assert fixes == [0, -1, 2, None]
    fix = dict(zip(fixes[::2], fixes[1::2], strict=True))
    assert [read_percent(1_000, row, 0, peak, fix, at) for at in range(3)] == [499, 500, None]
    assert read_percent(1_000, ["-0", [0.5]], 0, peak, {}, 0) is None  # no rate: no MFU


def _script_function(name: str) -> str:
    """The text of one function of the page's script (decide.js), to run on its own."""
    from pathlib import Path

    import bench.report

    script = (Path(bench.report.__file__).parent / "templates" / "decide.js").read_text(encoding="utf-8")
    start = script.index(f"  function {name}(")
    return script[start : script.index("\n  }\n", start) + 4]


def test_the_pages_script_shows_the_mfu_read_point_reads(data, tmp_path):
    """decide.js's own `rates` and `mfuOf`, run by node over every fitting cell: the percent read_point reads. Node
    (Debian's nodejs) is on the machines this suite runs on; where it is missing the test says so and fails."""
    from bench.report.decide_mfu import CLASS_CODES, NO_RATE

    assert shutil.which("node"), "this test runs the page's script with node: apt-get install nodejs"

    expected = [
        [c["mfu_percent"] for c in read_point(data, at)["cells"].values() if c["verdict"] == "fits"]
        for at in range(len(data["points"]))
    ]
    (tmp_path / "data.json").write_text(json.dumps(data), encoding="utf-8")
    program = "\n".join(
        [
            f"var D = JSON.parse(require('fs').readFileSync({json.dumps(str(tmp_path / 'data.json'))}, 'utf8'));",
            f"var CFG = {json.dumps({'classes': CLASS_CODES, 'no_rate': NO_RATE})};",
            _script_function("rates"),
            _script_function("mfuOf"),
            "var out = D.points.map(function(p, at){",
            "  var r = rates(at), fixes = {}, marks = D.marks[p[1]], shown = [], f = 0;",
            "  for (var x = 0; x < p[8].length; x += 2) fixes[p[8][x]] = p[8][x + 1];",
            "  for (var i = 0; i < D.cells.length; i++) {",
            "    var mark = marks.charAt(i);",
            "    if (mark === '-' || mark === 'x' || D.verdicts['abcdefghij'.indexOf(mark)] !== 'fits') continue;",
            "    shown.push(mfuOf(p[4][f], i, r, fixes, f)); f++;",
            "  }",
            "  return shown;",
            "});",
            "process.stdout.write(JSON.stringify(out));",
        ]
    )
    ran = subprocess.run(["node", "-e", program], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(ran.stdout) == expected
