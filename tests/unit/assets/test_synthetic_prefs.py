"""The synthetic preference data of the real-architecture workloads carries a learnable preference, and its lengths
are the workload's (bench/assets/synthetic_prefs.py)."""

import statistics

from bench.assets.synthetic_prefs import TOKENS_PER_WORD, generate, row_lengths
from bench.matrix.profiles import SyntheticPrefs, load_workload


def words(text: str) -> list[str]:
    return [w.strip(".").lower() for w in text.split()]


def test_chosen_and_rejected_are_told_apart_by_their_words():
    rows = generate(SyntheticPrefs(rows=200, seed=0), 1024)
    chosen = {w for r in rows for w in words(r["chosen"])}
    rejected = {w for r in rows for w in words(r["rejected"])}
    assert not chosen & rejected  # the registers share no word: a policy can learn which one is preferred
    prompts = {w for r in rows for w in words(r["prompt"])}
    assert prompts & chosen and prompts & rejected  # prompts use both


def test_lengths_follow_the_workload_whatever_the_words():
    spec = load_workload("llama-3.2-1b").dataset.synthetic
    rows = generate(spec, 1024)
    expected = row_lengths(spec, 1024)
    assert [(len(r["prompt"].split()), len(r["chosen"].split()), len(r["rejected"].split())) for r in rows] == expected
    answers = [n for _, c, r in expected for n in (c, r)]
    median_tokens = statistics.median(answers) * TOKENS_PER_WORD
    assert 0.8 * spec.answer_median_tokens < median_tokens < 1.2 * spec.answer_median_tokens
    chosen, rejected = (statistics.median(row[i] for row in expected) for i in (1, 2))
    assert abs(chosen - rejected) < 0.05 * chosen  # one distribution: length is no cue to the preference


def test_the_same_seed_gives_the_same_rows():
    spec = SyntheticPrefs(rows=20, seed=3)
    assert generate(spec, 256) == generate(spec, 256)
    assert generate(spec, 256) != generate(SyntheticPrefs(rows=20, seed=4), 256)
