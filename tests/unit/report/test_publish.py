"""publish: results/README.md index and the static site, from runs built here (tmp_path, never results/)."""

import dataclasses
import html
import os
import re
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

from bench.cli import main
from bench.matrix.axes import Backend
from bench.report.cells import BADGES, MARKS
from bench.report.matrix_table import render
from bench.report.publish import discover, profile_view, read_config
from bench.report.site import (
    PALETTE,
    STATUS_COLORS,
    backend_color,
    cell_panel,
    matrix_table,
    scatter_svg,
    status_css,
    status_legend,
    winners,
    winners_svg,
)
from bench.report.summary import summarize
from bench.results.env_schema import EnvFingerprint
from bench.results.schema import ErrorClass, Learning, RankMemoryFigures, ResultRecord, Status
from tests.unit.report.test_compare import ENV, MiB, rec, with_model_memory, write_run

MATRIX_YAML = """
axes:
  init: [two_models, one_adapter]
  quant: [none, int8]
  backend: [single, ddp, zero2]
variants:
  - {init: [one_adapter], quant: [none], backend: [ddp], launcher: mpirun}
"""
KNOWN_ISSUE = "https://github.com/huggingface/trl/issues/1377"
KNOWN_ISSUE_NOTE = "DeepSpeed rejects this optimizer <without> a flag"
DEEPSPEED_JSON = '{"zero_optimization": {"stage": 2}, "zero_allow_untested_optimizer": true}'
BUDGET = 2 * 2**30
"""The 2xA10 run's per-rank memory budget."""
A10_ENV = {
    **ENV,
    "hardware_profile": "2xA10",
    "image": "dpo-bench:cuda-1a2b3c",
    "workload": "phi2",
    "hardware": {"machine": "x86_64", "cpu_count": 32, "gpus": [{"name": "NVIDIA A10"}, {"name": "NVIDIA A10"}]},
    "git_sha": "0123456789abcdef",
}


def cell_ids() -> list[str]:
    base = [
        f"{i}-{q}-{b}"
        for i in ("two_models", "one_adapter")
        for q in ("none", "int8")
        for b in ("single", "ddp", "zero2")
    ]
    return [*base, "one_adapter-none-ddp+mpirun"]


def fixture_record(cell_id: str, hardware: str, n: int) -> ResultRecord:
    if cell_id.startswith("two_models-int8"):
        return rec(cell_id, Status.NOT_APPLICABLE, message="quantized_full_finetune: full fine-tuning of int8 weights")
    if cell_id == "one_adapter-none-zero2":
        error = rec(cell_id, Status.ERROR, error_class=ErrorClass.CONFIG, message="ValueError: bad zero config")
        return error.model_copy(
            update={
                "known_issue": KNOWN_ISSUE,
                "known_issue_note": KNOWN_ISSUE_NOTE,
                "log_tail": "Traceback ...\nValueError: bad zero config",
                "config_files": ["configs/one_adapter-none-zero2/deepspeed.json", "configs/gone/accelerate.yaml"],
                "memory_budget_bytes": BUDGET if hardware == "2xA10" else None,
            }
        )
    if cell_id == "one_adapter-int8-ddp":
        oom = rec(cell_id, Status.OOM, message="CUDA out of memory")
        if hardware == "2xA10":  # newer records: the kernel's figures of the rank it killed
            figures = [
                RankMemoryFigures(rank=0, kernel_peak_bytes=1500 * MiB, limit_bytes=BUDGET),
                RankMemoryFigures(rank=1, kernel_peak_bytes=BUDGET, limit_bytes=BUDGET, oom_killed=True),
            ]
            oom = oom.model_copy(update={"memory_budget_bytes": BUDGET, "rank_memory": figures})
        return oom
    factor = 3.0 if hardware == "2xA10" else 1.0
    record = rec(cell_id, tokens=(1000 + 100 * n) * factor, peak_mib=400 + 20 * n)
    launcher = "mpirun" if cell_id.endswith("+mpirun") else "python"
    record = record.model_copy(update={"hardware": hardware, "launcher": launcher})
    if hardware == "2xA10":  # 2xA10 has the newer fields, cpu is an older run without them
        record = with_model_memory(record, model_mib=100 + 10 * n, baseline_mib=300 + 10 * n)
        learning = Learning(first_loss=0.6931, last_loss=0.41, end_loss=0.45, reward_accuracy=0.875)
        record = record.model_copy(update={"learning": learning, "memory_budget_bytes": BUDGET})
    return record


def build_results(root: Path) -> tuple[Path, Path]:
    """scenarios/ with a 13-cell matrix; results/ with cpu (complete + newer partial run), 2xA10, and 4xL4
    (a run but no MATRIX.md, so not published)."""
    scenarios = root / "scenarios"
    scenarios.mkdir(parents=True)
    (scenarios / "matrix.yaml").write_text(MATRIX_YAML, encoding="utf-8")
    results = root / "results"
    for hardware, env in (("cpu", ENV), ("2xA10", A10_ENV)):
        records = [fixture_record(c, hardware, n) for n, c in enumerate(cell_ids())]
        run_dir = write_run(results / hardware / "20260101-000000", records, env)
        config = run_dir / "configs" / "one_adapter-none-zero2" / "deepspeed.json"
        config.parent.mkdir(parents=True)
        config.write_text(DEEPSPEED_JSON, encoding="utf-8")
        (results / hardware / "MATRIX.md").write_text(f"# {hardware}\n", encoding="utf-8")
    write_run(results / "cpu" / "20260102-000000", [rec("one_adapter-none-single", tokens=1)], ENV)
    write_run(results / "4xL4" / "20260101-000000", [rec("one_adapter-none-single")], ENV)
    return results, scenarios


def site_text(site: Path) -> str:
    """Every hardware profile's page of the site, one after the other (index.html links them)."""
    pages = sorted(site.glob("hw-*.html"))
    assert pages, f"{site}: no profile page"
    return "".join(p.read_text(encoding="utf-8") for p in pages)


@pytest.fixture
def published(tmp_path: Path) -> tuple[Path, str, str]:
    results, scenarios = build_results(tmp_path)
    assert main(["--results", str(results), "--scenarios", str(scenarios), "publish"]) == 0
    readme = (results / "README.md").read_text(encoding="utf-8")
    return results, readme, site_text(results / "site")


def test_index_is_short_and_links_a_page_per_profile(published):
    results, _, _ = published
    site = results / "site"
    index = (site / "index.html").read_text(encoding="utf-8")
    assert sorted(p.name for p in site.glob("hw-*.html")) == ["hw-2xA10.html", "hw-cpu.html"]
    assert 'href="hw-2xA10.html"' in index and 'href="hw-cpu.html"' in index
    assert "<details" not in index and 'class="matrix"' not in index and len(index) < 8_000
    for page in ("hw-2xA10.html", "hw-cpu.html"):
        text = (site / page).read_text(encoding="utf-8")
        assert text.count('<table class="matrix"') == 1 and 'href="index.html"' in text
    (site / "hw-gone.html").write_text("a profile no longer published", encoding="utf-8")
    assert main(["--results", str(results), "--scenarios", str(results.parent / "scenarios"), "publish"]) == 0
    assert not (site / "hw-gone.html").exists()


def test_readme_indexes_profiles_with_a_matrix_and_their_latest_complete_run(published):
    _, readme, _ = published
    rows = [line for line in readme.splitlines() if line.startswith("| ") and "MATRIX.md" in line]
    assert [row.split(" | ")[0] for row in rows] == ["| 2xA10", "| cpu"]
    a10, cpu = rows
    assert "[`20260101-000000`](cpu/20260101-000000/)" in cpu and "20260102" not in readme
    assert "2026-01-01T00:00:00+00:00" in cpu and "none (local venv)" in cpu and "torch 2.13.0+cpu, trl 1.16.0" in cpu
    assert "dpo-bench:cuda-1a2b3c" in a10 and "phi2" in a10 and "0123456789" in a10
    assert "[site/index.html](site/index.html)" in readme
    assert "4xL4" not in readme


def test_site_has_every_cell_of_every_profile_with_its_panel(published):
    _, _, page = published
    text = html.unescape(page)
    for hardware in ("cpu", "2xA10"):
        for cell_id in cell_ids():
            assert f'id="cell-{hardware}-{cell_id}"' in text
            assert f'href="#cell-{hardware}-{cell_id}"' in text
            assert f"make bench HW={hardware} FILTER='{cell_id}'" in text
    assert text.count('<table class="matrix"') == 2
    assert "4xL4" not in text


def test_site_panel_shows_the_real_error_known_issue_and_inlined_configs(published):
    _, _, page = published
    panel = re.search(
        r'<details class="panel" id="cell-cpu-one_adapter-none-zero2".*?</details>(?=<details class="panel")',
        page,
        re.S,
    )
    assert panel is not None
    body = html.unescape(panel.group(0))
    assert "ValueError: bad zero config" in body
    assert f'Known issue: <a href="{KNOWN_ISSUE}">{KNOWN_ISSUE}</a> — {KNOWN_ISSUE_NOTE}</p>' in body
    assert "DeepSpeed rejects this optimizer &lt;without&gt; a flag" in panel.group(0)
    assert DEEPSPEED_JSON in body
    assert "configs/gone/accelerate.yaml" in body and "(not in the published results)" in body
    assert "Log tail" in body


SVG = "{http://www.w3.org/2000/svg}"


def plots_in(page: str) -> dict[tuple[str, str], str]:
    """(kind, hardware) -> the `<svg>` of that plot, from the page's `profile-plots` blocks."""
    found = {}
    for block in re.finditer(r'<div class="profile-plots" data-hardware="([^"]+)">(.*?)</div>', page):
        for svg in re.finditer(r'<svg class="plot (\w+)".*?</svg>', block.group(2)):
            found[(svg.group(1), block.group(1))] = svg.group(0)
    return found


def artists(svg: str, prefix: str) -> dict[str, str]:
    """id -> fill colour of every artist whose id (matplotlib's gid, its group's id) starts with `prefix`."""
    colours = {}
    for group in ElementTree.fromstring(svg).iter(f"{SVG}g"):
        if group.get("id", "").startswith(prefix):
            style = next(e.get("style") for e in group.iter() if "fill:" in (e.get("style") or ""))
            colours[group.get("id")] = re.search(r"fill: (#[0-9a-f]{6})", style).group(1)
    return colours


def texts(svg: str) -> list[str]:
    return [t.text for t in ElementTree.fromstring(svg).iter(f"{SVG}text")]


def test_site_is_self_contained_with_svg_plots(published):
    _, _, page = published
    assert page.count("<svg") == 4  # scatter + winners per profile
    assert "<link" not in page and " src=" not in page and "@import" not in page
    assert not re.search(r"url\((?!#)", page), "only the plots' own clip paths, in the page"
    plots = plots_in(page)
    assert sorted(plots) == [(k, h) for k in ("scatter", "winners") for h in ("2xA10", "cpu")]
    for hardware in ("2xA10", "cpu"):
        ok = set(re.findall(rf'<a class="cell s-ok" href="#cell-{hardware}-[^"]+" data-cell="([^"]+)"', page))
        assert len(ok) == 8  # 13 cells - 3 not applicable - 1 error - 1 oom
        # a dot per ok cell, named after it
        assert set(artists(plots[("scatter", hardware)], "point-")) == {f"point-{hardware}-{c}" for c in ok}
        assert "no ok cell" not in texts(plots[("scatter", hardware)])
    ids = re.findall(r' id="([^"]+)"', page)
    assert len(ids) == len(set(ids)), "no id twice on the page"


def test_plots_are_the_same_bytes_in_another_process(tmp_path):
    """Publishing twice gives the same page: no date, ids from a fixed salt, nothing that depends on the process."""
    view = cpu_view(tmp_path)
    code = (
        "import sys; from pathlib import Path; from tests.unit.report.test_publish import cpu_view;"
        "from bench.report.site import scatter_svg, winners_svg; v = cpu_view(Path(sys.argv[1]));"
        "sys.stdout.write(scatter_svg(v) + '\\n' + winners_svg(v))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    other = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "other")], capture_output=True, text=True, env=env, check=True
    )
    assert other.stdout == scatter_svg(view) + "\n" + winners_svg(view)
    assert scatter_svg(view) == scatter_svg(view)


def test_winning_backend_per_init_and_quant(tmp_path):
    results, _ = build_results(tmp_path)

    (cpu, *_) = [r for r in discover(results, cell_ids()) if r.hardware == "cpu"]
    assert cpu.complete and cpu.run_dir is not None
    view = profile_view(cpu, cpu.run_dir, cell_ids())
    # tokens grow with the cell's position in the matrix, so the last ok backend of each row wins
    assert winners(view) == [
        ("two_models · none", "zero2", 1200.0),
        ("two_models · int8", None, None),
        ("one_adapter · none", "ddp", 1700.0),
        ("one_adapter · int8", "zero2", 2100.0),
    ]
    svg = winners_svg(view)
    # a bar per row with a working backend, in the winner's colour; the row without one says so
    assert artists(svg, "winner-") == {
        "winner-cpu-dpo-two_models-none": backend_color("zero2"),
        "winner-cpu-dpo-one_adapter-none": backend_color("ddp"),
        "winner-cpu-dpo-one_adapter-int8": backend_color("zero2"),
    }
    shown = texts(svg)
    assert {"zero2 · 1,200", "no working backend", "ddp · 1,700", "zero2 · 2,100"} <= set(shown)
    rows = [row for row, _, _ in winners(view)]
    assert [t for t in shown if t in rows] == rows  # the y axis, first row on top
    assert "cpu: fastest working backend per init · quant" in shown


def test_secrets_never_reach_the_site(tmp_path, monkeypatch):
    results, scenarios = build_results(tmp_path)
    monkeypatch.setenv("HF_TOKEN", "s3cr3t-value-123")
    message = "auth failed for s3cr3t-value-123 ghp_" + "a" * 30
    write_run(results / "cpu" / "20260103-000000", [rec(c, Status.ERROR, message=message) for c in cell_ids()])
    assert main(["--results", str(results), "--scenarios", str(scenarios), "publish"]) == 0
    page = site_text(results / "site")
    assert "auth failed for ***" in page
    assert "s3cr3t-value-123" not in page and "ghp_aaaa" not in page


def test_out_option_and_relative_site_link(tmp_path):
    results, scenarios = build_results(tmp_path)
    out = tmp_path / "public" / "site"
    assert main(["--results", str(results), "--scenarios", str(scenarios), "publish", "--out", str(out)]) == 0
    assert (out / "index.html").is_file() and not (results / "site").exists()
    assert "[../public/site/index.html](../public/site/index.html)" in (results / "README.md").read_text()


def test_publish_with_no_matrix_yet_writes_an_empty_index(tmp_path, capsys):
    results, scenarios = tmp_path / "results", build_results(tmp_path / "x")[1]
    results.mkdir()
    assert main(["--results", str(results), "--scenarios", str(scenarios), "publish"]) == 0
    assert "no hardware profile has a MATRIX.md yet" in (results / "README.md").read_text()
    assert main(["--results", str(tmp_path / "nope"), "--scenarios", str(scenarios), "publish"]) == 2
    assert "no such results folder" in capsys.readouterr().err


def test_config_paths_outside_the_run_dir_are_not_published(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (tmp_path / "secret.txt").write_text("nope")
    assert read_config(run_dir, "../secret.txt").text is None
    (run_dir / "a.yaml").write_text("x: 1")
    assert read_config(run_dir, "a.yaml").text == "x: 1"


def test_env_json_is_read_for_the_index(tmp_path):
    results, _ = build_results(tmp_path)
    found = {r.hardware: r for r in discover(results, cell_ids())}
    assert set(found) == {"cpu", "2xA10"}
    assert found["2xA10"].env == EnvFingerprint.model_validate(A10_ENV)
    assert found["2xA10"].env.hardware.summary == "x86_64, 32 cores, NVIDIA A10, NVIDIA A10"


def test_index_and_site_name_the_local_venv_the_same_way(published):
    _, readme, page = published
    (cpu,) = [line for line in readme.splitlines() if line.startswith("| cpu |")]
    assert "| none (local venv) |" in cpu
    assert "image none (local venv)" in html.unescape(page)


def test_a_run_without_env_json_is_indexed_with_dashes(tmp_path):
    results, scenarios = build_results(tmp_path)
    (results / "2xA10" / "20260101-000000" / "env.json").unlink()
    assert main(["--results", str(results), "--scenarios", str(scenarios), "publish"]) == 0
    (a10,) = [line for line in (results / "README.md").read_text().splitlines() if line.startswith("| 2xA10 |")]
    assert a10.endswith("| — | — | — | — | — | — |")
    assert "workload ? · image none (local venv)" in html.unescape(site_text(results / "site"))


# ---------------------------------------------------------------- one grid, one label for MATRIX.md and the site


def untagged(text: str) -> str:
    return re.sub(r"<[^>]+>", "", text)


def as_site(label: str) -> str:
    """A MATRIX.md label with its emoji mark written as the site's text mark."""
    for status in Status:
        if label.startswith(MARKS[status]):
            return BADGES[status] + label[len(MARKS[status]) :]
    return label


def cpu_view(tmp_path: Path):
    results, _ = build_results(tmp_path)
    (cpu,) = [r for r in discover(results, cell_ids()) if r.hardware == "cpu"]
    assert cpu.run_dir is not None
    return profile_view(cpu, cpu.run_dir, cell_ids())


def test_site_and_matrix_md_show_the_same_cells_in_the_same_places(tmp_path):
    view = cpu_view(tmp_path)
    markdown = render(list(view.records.values()), "cpu", [])
    md_rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in markdown.splitlines()
        if line.startswith("| ") and " · " in line.split("|")[1]  # header and grid rows
    ]
    table = matrix_table(view)
    site_rows = [
        [html.unescape(re.sub(r"<[^>]+>", "", cell)) for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row)]
        for row in re.findall(r"<tr>(.*?)</tr>", table)
    ]
    # MATRIX.md adds the footnote number and writes its marks as emoji, the site as text; otherwise every label is
    # the site's
    assert [[as_site(re.sub(r" \[\d+\]$", "", c)) for c in row] for row in md_rows] == site_rows
    assert site_rows[0] == ["init · quant", "single", "ddp", "zero2"]
    assert site_rows[1] == [
        "two_models · none",
        "OK 1,000 tok/s · 400 MiB",
        "OK 1,100 tok/s · 420 MiB",
        "OK 1,200 tok/s · 440 MiB",
    ]
    assert "one_adapter-none-ddp+mpirun" in table and "## Variants" in markdown


# ---------------------------------------------------------------- backend colours


def test_every_backend_has_its_own_colour_from_the_palette_by_axis_position():
    colours = [backend_color(b) for b in Backend]
    assert colours == list(PALETTE[: len(Backend)])
    assert len(set(colours)) == len(Backend)
    assert backend_color("zero3_offload") == PALETTE[list(Backend).index(Backend.ZERO3_OFFLOAD)]
    assert backend_color("not_a_backend") == "#999"


def test_scatter_has_a_dot_per_ok_cell_in_its_backends_colour_and_every_backend_in_the_legend(tmp_path):
    view = cpu_view(tmp_path)
    records = {f"one_adapter-none-{b}": rec(f"one_adapter-none-{b}") for b in Backend}
    svg = scatter_svg(dataclasses.replace(view, records=records, cells=summarize(records.values())))
    assert svg.startswith('<svg class="plot scatter" role="img" aria-label="cpu: tokens/s vs peak memory" ')
    assert "\n" not in svg
    assert artists(svg, "point-") == {f"point-cpu-one_adapter-none-{b}": backend_color(b) for b in Backend}
    shown = texts(svg)
    assert shown[-len(Backend) :] == [b.value for b in Backend]  # the legend, last, in axis order
    assert {"cpu: tokens/s vs peak memory", "peak training memory (MiB)", "tokens/s", "backend"} <= set(shown)
    ElementTree.fromstring(svg)  # well-formed


def test_scatter_ticks_keep_the_decimals_a_narrow_axis_needs(tmp_path):
    view = cpu_view(tmp_path)
    records = {
        c: rec(c, tokens=1000.0 + 500 * n, peak_mib=646.1 + n * 0.8)
        for n, c in enumerate(("one_adapter-none-single", "one_adapter-none-ddp"))
    }
    svg = scatter_svg(dataclasses.replace(view, records=records, cells=summarize(records.values())))
    ticks = [t for t in texts(svg) if t and t[0].isdigit()]
    assert len(ticks) == len(set(ticks)), ticks  # 646.1, 646.2, ... not 646 five times
    assert any("." in t for t in ticks) and any("," in t for t in ticks)  # MiB with decimals, tokens/s in thousands


def test_plots_without_an_ok_cell_say_so(tmp_path):
    view = cpu_view(tmp_path)
    records = {c: rec(c, Status.ERROR, error_class=ErrorClass.CONFIG, message="x") for c in view.records}
    failed = dataclasses.replace(view, records=records, cells=summarize(records.values()))
    scatter = scatter_svg(failed)
    assert "no ok cell" in texts(scatter) and not artists(scatter, "point-")
    winners_plot = winners_svg(failed)
    assert texts(winners_plot).count("no working backend") == len(winners(failed)) == 4
    assert not artists(winners_plot, "winner-")


# ---------------------------------------------------------------- model memory, budget, learning and status colours


def test_newer_records_show_model_memory_the_budget_and_the_oom_figures(published):
    _, _, page = published
    text = html.unescape(page)
    a10 = untagged(text)[untagged(text).index("init · quant") :]
    assert "OK 3,000 tok/s · model 100 MiB / peak 400 MiB" in a10[: a10.index("cpu")]  # two_models-none-single, n=0
    assert "OOM (rank 1 at 2.00 GiB, budget 2.00 GiB)" in a10
    a10 = text[text.index('<table class="matrix" data-hardware="2xA10"') :]
    a10 = a10[: a10.index("</table>")]
    assert '<span class="mark">OOM</span> (rank 1 at 2.00 GiB, budget 2.00 GiB)' in a10
    assert "Per-rank memory budget: 2.00 GiB (kernel memory cgroup)." in text
    # the older cpu run keeps its single figure and has no budget line
    cpu = text[text.index('<table class="matrix" data-hardware="cpu"') :]
    assert '<span class="mark">OK</span> 1,000 tok/s · 400 MiB' in cpu[: cpu.index("</table>")]
    # in the 2xA10 heading only; each panel of a cell that ran says it among its facts
    assert text.count("Per-rank memory budget: 2.00 GiB (kernel memory cgroup).</p>") == 1
    assert text.count("<dt>memory budget</dt><dd>2.00 GiB per rank (kernel memory cgroup)</dd>") == 10
    assert "some cells ran without one" not in text


def panel_of(page: str, hardware: str, cell_id: str) -> str:
    found = re.search(
        rf'<details class="panel" id="cell-{hardware}-{re.escape(cell_id)}".*?</details>(?=<details class="panel"|'
        r"</section>)",
        page,
        re.S,
    )
    assert found is not None
    return html.unescape(found.group(0))


def test_panel_shows_memory_figures_learning_and_rank_memory(published):
    _, _, page = published
    ok = panel_of(page, "2xA10", "two_models-none-single")
    assert "<th>model memory (peak − library baseline, max over ranks, median)</th><td>100.0 MiB</td>" in ok
    assert "<th>peak (kernel cgroup peak, median)</th><td>400.0 MiB</td>" in ok
    assert "<th>library baseline (libraries imported, model not loaded)</th><td>300.0 MiB</td>" in ok
    assert "<dt>memory budget</dt><dd>2.00 GiB per rank (kernel memory cgroup)</dd>" in ok
    assert "<h5>Learning</h5>" in ok and "<td>0.6931</td>" in ok and "<td>0.4500</td>" in ok and "87.50%" in ok
    assert "The learning check passed." in ok
    oom = panel_of(page, "2xA10", "one_adapter-int8-ddp")
    assert "<h5>Memory per rank</h5>" in oom
    killed = (
        "<tr><td>1</td><td>—</td><td>—</td><td>—</td><td>2,048.0 MiB</td><td>2,048.0 MiB</td><td>yes</td>"
        "<td>—</td></tr>"  # no report from the killed rank: no batch width
    )
    assert killed in oom
    # an older record: none of it
    old = panel_of(page, "cpu", "two_models-none-single")
    assert "model memory" not in old and "<h5>Learning</h5>" not in old and "Memory per rank" not in old
    assert "<th>train peak (rss, median)</th><td>400.0 MiB</td>" in old


def test_learning_failed_cell_has_its_mark_colour_and_failures(tmp_path):
    view = cpu_view(tmp_path)
    failure = "loss did not fall: 0.6931 at step 1, 0.6850 over the last 7 of 30 steps"
    record = rec("one_adapter-none-single", Status.LEARNING_FAILED, message=failure)
    learning = Learning(first_loss=0.6931, last_loss=0.69, end_loss=0.685, reward_accuracy=0.5, losses=[0.6931, None])
    learning.failures = [failure]
    record = with_model_memory(
        record.model_copy(update={"metrics": rec("one_adapter-none-single").metrics, "learning": learning}), 80, 545
    )
    records = {**view.records, record.cell_id: record}
    view = dataclasses.replace(view, records=records, cells=summarize(records.values()))
    table = html.unescape(matrix_table(view))
    assert 'class="cell s-learning_failed"' in table
    assert "LEARNING 1,000 tok/s · model 80 MiB / peak 625 MiB" in untagged(table)
    panel = html.unescape(cell_panel(view, record.cell_id))
    assert '<span class="badge s-learning_failed"><span class="mark">LEARNING</span> learning_failed</span>' in panel
    assert f'<pre class="message">{failure}</pre>' in panel
    assert f'<ul class="learning-failures"><li>{failure}</li></ul>' in panel
    assert "<th>steps with a finite loss</th><td>1 of 2</td>" in panel and "<td>0.6850</td>" in panel
    # not ok: it is no point of the scatter plot and wins no row
    assert "one_adapter-none-single" not in scatter_svg(view)
    assert ("one_adapter · none", "ddp", 1700.0) in winners(view)


def test_every_status_has_a_colour_and_a_legend_entry_in_enum_order():
    assert set(STATUS_COLORS) == set(Status)
    css = status_css()
    assert [m.group(1) for m in re.finditer(r"\.s-(\w+)\{", css)] == [s.value for s in Status]
    assert len({STATUS_COLORS[s] for s in Status}) == len(Status)
    legend = html.unescape(status_legend())
    assert re.findall(r'class="badge s-(\w+)"', legend) == [s.value for s in Status]
    assert '<span class="mark">LEARNING</span> learning_failed' in legend
    assert not re.search("[\u2600-\u27bf\U0001f000-\U0001faff]", legend), "the site's marks need no emoji font"


def test_the_page_carries_the_status_colours_and_legend(published):
    _, _, page = published
    assert ".s-learning_failed{" in page and '<p class="status-legend">' in page


def test_cell_cost_of_the_committed_cpu_run():
    from bench.paths import RESULTS_DIR
    from bench.report.publish import cell_cost
    from bench.results.store import load_results

    records = load_results(RESULTS_DIR / "cpu" / "20261123-141125").records
    cost = cell_cost(records)
    assert (cost.cells, cost.over_20_s) == (54, 21)
    assert cost.wall_s == pytest.approx((9.546, 18.995, 40.569), abs=1e-3)
    assert cost.library_share == pytest.approx((0.836, 0.847, 0.865), abs=1e-3)
    assert cell_cost([r.model_copy(update={"status": Status.ERROR}) for r in records]) is None
