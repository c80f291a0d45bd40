"""`first-contact` on CPU: the profile it picks for a card, its phases, its archive (bench/run/first_contact.py). The
whole command ran on the lent H200: results/1xH200/20261126-182033."""

import tarfile

import pytest

from bench.errors import BenchError
from bench.run.first_contact import EMULATED, WORKLOAD, archive, phases, pick_profile


def test_each_card_gets_its_shipped_one_gpu_profile_or_its_catalog_entry():
    assert pick_profile("NVIDIA H200") == ["--hw", "1xH200"]
    assert pick_profile("NVIDIA H100 80GB HBM3") == ["--hw", "1xH100"]
    assert pick_profile("NVIDIA A10") == ["--hw", "1xA10"]
    assert pick_profile("NVIDIA A100-SXM4-80GB") == ["--gpu", "A100-80G:1"]
    with pytest.raises(BenchError, match="not in the GPU catalog"):
        pick_profile("NVIDIA H100 NVL")


def test_the_phases_cover_first_then_phi2_on_an_emulated_a10_then_the_rest():
    coverage, emulated, rest = phases(["--hw", "1xH200"], ["a", "b"], "R", 240)
    assert coverage.argv[-2:] == ["--filter", "a,b"] and WORKLOAD in coverage.argv
    assert ["--hw", EMULATED[0], "--emulate", "--workload", EMULATED[1]] == emulated.argv[:5]
    assert emulated.argv[-1] == ",".join(EMULATED[2])
    assert "--filter" not in rest.argv and rest.argv[rest.argv.index("--run-id") + 1] == "R"
    assert all(p.argv[p.argv.index("--cell-timeout") + 1] == "240" for p in (coverage, emulated, rest))


def test_the_archive_holds_each_run_folder_and_its_tables(tmp_path):
    run = tmp_path / "results" / "1xH200" / "R"
    run.mkdir(parents=True)
    (run / "results.jsonl").write_text("{}\n")
    (run.parent / "MATRIX.md").write_text("# m\n")
    log = tmp_path / "first-contact.log"
    log.write_text("log\n")
    path = archive([run, tmp_path / "results" / "1xA10" / "R"], [log], tmp_path / "out", "fc")
    with tarfile.open(path) as tar:
        assert sorted(tar.getnames()) == [
            "1xH200/R", "1xH200/R/MATRIX.md", "1xH200/R/results.jsonl", "first-contact.log"
        ]  # fmt: skip
