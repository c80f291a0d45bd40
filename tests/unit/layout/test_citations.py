"""Every committed run that README.md, docs/ or the code's docstrings cite as `results/<HW>/<run>` exists, and the
figures quoted from a run agree with its records."""

import re
from pathlib import Path

import pytest

from bench.paths import PROJECT_ROOT, RESULTS_DIR

AB_FILE = "ab.json"
"""An A/B folder (`make compare-ab`: results/ab/<timestamp>/) holds its two sides' runs below it, and this."""
CITATION = re.compile(r"results/([A-Za-z0-9x.-]+)/(\d{8}-[A-Za-z0-9-]+)")
CITING = sorted(
    [PROJECT_ROOT / "README.md", *(PROJECT_ROOT / "docs").rglob("*.md"), *(PROJECT_ROOT / "bench").rglob("*.py")]
)


def cited_runs(text: str) -> set[tuple[str, str]]:
    return set(CITATION.findall(text))


def test_a_citation_is_read_from_text():
    text = "measured (results/cpu-budget-4g/20261123-083845: ...) and `results/cpu/20261123-recipes/`, not results/cpu/"
    assert cited_runs(text) == {("cpu-budget-4g", "20261123-083845"), ("cpu", "20261123-recipes")}


@pytest.mark.parametrize("path", CITING, ids=lambda p: str(p.relative_to(PROJECT_ROOT)))
def test_every_cited_run_exists(path: Path):
    missing = [
        f"results/{hw}/{run}"
        for hw, run in sorted(cited_runs(path.read_text(encoding="utf-8")))
        if not (RESULTS_DIR / hw / run / AB_FILE if hw == "ab" else RESULTS_DIR / hw / run / "results.jsonl").is_file()
    ]
    assert missing == [], f"{path.relative_to(PROJECT_ROOT)} cites runs that are not committed"


def test_the_loss_swing_the_learning_check_quotes_is_in_its_run():
    from bench.results.store import load_results

    record = load_results(RESULTS_DIR / "cpu" / "20261123-141125").latest_by_cell()["one_adapter-none-single"]
    losses = record.learning.losses
    assert (round(losses[28], 3), round(losses[29], 3), round(record.learning.end_loss, 3)) == (0.359, 0.726, 0.569)
    assert len(losses) == 30
