"""Every method in MATRIX.md, the console and the site: DPO's grid as before, a section per other method from its
own run, and the pipeline as one row of stages."""

import json

from bench.pipeline.chain import write_stage
from bench.report.matrix_file import method_runs, write_matrix
from bench.report.matrix_table import render
from bench.report.pipeline_row import stages_table
from bench.report.publish import publish
from bench.results.schema import StageRecord, Status
from bench.results.store import append_result
from tests.unit.results.test_results import record

ENV = {"workload": "tiny", "hardware_profile": "cpu", "created_at": "2026-01-01T00:00:00+00:00"}


def method_record(method: str, cell: str = "one_adapter-none-single", status: Status = Status.OK):
    cell_id = cell if method == "dpo" else f"{method}-{cell}"
    return record(cell_id, status).model_copy(update={"method": method})


def test_other_methods_get_a_section_each_with_their_trainer_and_no_variant_confusion():
    records = [method_record("dpo"), method_record("sft"), method_record("orpo", status=Status.ERROR)]
    text = render(records, "cpu", [])
    assert text.count("| init · quant | single |") == 3
    assert "## Method: sft · trl.SFTTrainer\n" in text
    assert "## Method: orpo · trl.experimental.orpo.ORPOTrainer (experimental)" in text
    assert "## Variants" not in text  # a method's cell is a base cell of its own grid, not a variant of DPO's
    assert text.index("## Method: sft") < text.index("## Method: orpo")


def stages(run_id: str, statuses: list[Status]) -> list[StageRecord]:
    names = ["sft", "merge_sft", "dpo", "merge_dpo", "generate"]
    return [
        StageRecord(
            run_id=run_id,
            pipeline="p",
            index=i,
            stage=name,
            kind="x",
            hardware="cpu",
            workload="tiny",
            status=status,
            wall_s=1.5 if status != Status.NOT_RUN else None,
            peak_bytes=3 * 2**20,
            message="" if status == Status.OK else "not run: stage 3 (dpo) ended error: boom",
        )
        for i, (name, status) in enumerate(zip(names, statuses, strict=True), start=1)
    ]


def test_the_pipeline_is_one_row_of_stages_with_why_a_stage_did_not_run():
    text = stages_table(stages("r9", [Status.OK, Status.OK, Status.ERROR, Status.NOT_RUN, Status.NOT_RUN]))
    assert "| pipeline run | workload | 1. sft | 2. merge_sft | 3. dpo | 4. merge_dpo | 5. generate |" in text
    assert "| `r9` | tiny | ✅ 1.5 s · 3 MiB | ✅ 1.5 s · 3 MiB | ❌ 1.5 s · 3 MiB | ⏭️ not run · 3 MiB |" in text
    assert "- 4. merge_dpo: not_run — not run: stage 3 (dpo) ended error: boom" in text


def test_matrix_md_takes_each_method_from_its_newest_complete_run_and_shows_the_pipeline(tmp_path):
    hardware = tmp_path / "cpu"
    dpo_run, sft_run = hardware / "20260101-000000", hardware / "20260102-000000"
    for run, records in ((dpo_run, [method_record("dpo")]), (sft_run, [method_record("sft")])):
        run.mkdir(parents=True)
        (run / "env.json").write_text(json.dumps(ENV | {"created_at": f"2026-01-0{run.name[7]}T00:00:00+00:00"}))
        for r in records:
            append_result(run, r)
    from bench.matrix.cell import Cell

    cells = [
        Cell(method=m, init="one_adapter", quant="none", backend="single", launcher="python") for m in ("dpo", "sft")
    ]
    runs = method_runs(hardware, cells)
    assert runs == {"dpo": dpo_run, "sft": sft_run}
    for stage in stages("p1", [Status.OK] * 5):
        write_stage(hardware / "pipelines" / "p1", stage)
    text = write_matrix(runs["dpo"], [c.id for c in cells], runs).read_text()
    assert text.startswith("# Compatibility matrix (dpo, sft) — cpu\n") and "Run `20260101-000000`" in text
    sft = text[text.index("## Method: sft") :]
    assert "Run `20260102-000000`" in sft and "| one_adapter · none | ✅" in sft
    assert "## Pipelines: SFT → merge → DPO → merge → generate" in text and "[`pipelines/p1/`](pipelines/p1/)" in text
    assert (hardware / "matrix.csv").read_text().splitlines()[0].startswith("cell_id,method,")


def test_the_site_has_a_view_per_method_and_the_pipeline_row(tmp_path):
    results = tmp_path / "results"
    dpo_run, kto_run = results / "cpu" / "20260101-000000", results / "cpu" / "20260102-000000"
    for run, r in ((dpo_run, method_record("dpo")), (kto_run, method_record("kto"))):
        run.mkdir(parents=True)
        (run / "env.json").write_text(json.dumps(ENV))
        append_result(run, r)
    (results / "cpu" / "MATRIX.md").write_text("# cpu\n")
    for stage in stages("p1", [Status.OK, Status.ERROR, Status.NOT_RUN, Status.NOT_RUN, Status.NOT_RUN]):
        write_stage(results / "cpu" / "pipelines" / "p1", stage)
    readme, index = publish(
        results, results / "site", ["one_adapter-none-single"], None, {"kto": ["kto-one_adapter-none-single"]}
    )
    assert 'href="hw-cpu.html"' in index.read_text()
    page = (index.parent / "hw-cpu.html").read_text()  # both methods' views on the profile's page
    assert 'id="hw-cpu"' in page and 'id="hw-cpu-kto"' in page and "cpu · kto · trl.KTOTrainer" in page
    assert 'data-cell="kto-one_adapter-none-single"' in page and 'data-cell="one_adapter-none-single"' in page
    assert "Pipeline: SFT → merge → DPO → merge → generate" in page and "s-not_run" in page
    assert "| cpu · kto | [MATRIX.md](cpu/MATRIX.md) | [`20260102-000000`]" in readme.read_text()
