"""`python -m bench validate-speed` and the PREDICTED tokens/s column of `predict`."""

from bench.cli import main


def test_validate_speed_writes_every_run_and_the_published_rows(tmp_path, capsys):
    out = tmp_path / "speed.md"
    assert main(["validate-speed", "--published", "--output", str(out)]) == 0
    text = out.read_text()
    assert "| cpu-budget/20261123-143013 | small |" in text
    assert "torchtune-llama31-8b-single-device: full, 1x A6000" in text and "held out" in text


def test_predict_has_a_predicted_tokens_per_s_column(capsys):
    assert main(["predict", "--hw", "1xL4", "--filter", "one_adapter-none-single"]) == 0
    text = capsys.readouterr().out
    assert "PREDICTED tokens/s (range)" in text
    row = next(line for line in text.splitlines() if line.startswith("| one_adapter-none-single |"))
    header = next(line for line in text.splitlines() if line.startswith("| cell |"))
    assert row.count("|") == header.count("|") == 14  # thirteen columns, the speed one among them


def test_validate_speed_without_measurements_is_a_one_line_error(tmp_path, capsys):
    assert main(["validate-speed", "--results", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0


def test_the_top_level_results_folder_is_the_one_validated(tmp_path, capsys):
    """`--results` before the command used to be ignored by validate-estimate and validate-speed: they read
    results/ whatever it said."""
    empty = tmp_path / "results"
    empty.mkdir()
    out = tmp_path / "estimate.md"
    assert main(["--results", str(empty), "validate-estimate", "--output", str(out)]) == 0
    assert "| results/" not in out.read_text(), out.read_text()[:2000]
    assert main(["--results", str(empty), "validate-speed"]) == 2
    assert f"under {empty}" in capsys.readouterr().err
