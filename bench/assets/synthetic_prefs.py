"""Synthetic preference pairs with realistic, long-tailed lengths for the real-architecture workloads.

Text is drawn from a seeded lexicon of pseudo-words with a Zipf frequency law, so a byte-level BPE trained on it
with a large vocabulary behaves like a real one (frequent words = one token, rare words split). Prompt and answer
lengths are log-normal (median + spread from the workload), capped so prompt + answer fits max_length.
Only throughput and memory depend on these rows; their meaning does not matter.
"""

import itertools
import random

from bench.matrix.profiles import SyntheticPrefs

TOKENS_PER_WORD = 1.3
"""Rough BPE tokens per pseudo-word; lengths below are converted to words with it."""
LEXICON_SIZE = 20_000
ONSETS = ["", "b", "br", "d", "f", "g", "k", "l", "m", "n", "p", "pl", "r", "s", "st", "t", "tr", "v", "z"]
VOWELS = ["a", "e", "i", "o", "u", "ai", "ou"]
CODAS = ["", "", "n", "r", "s", "t", "l", "m"]


def lexicon(size: int = LEXICON_SIZE, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words: set[str] = set()
    while len(words) < size:
        syllables = rng.choice([1, 2, 2, 3, 3, 4])
        words.add("".join(rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS) for _ in range(syllables)))
    return sorted(words)


def length_in_words(rng: random.Random, median_tokens: int, sigma: float, cap_tokens: int) -> int:
    tokens = min(cap_tokens, max(1, round(rng.lognormvariate(0.0, sigma) * median_tokens)))
    return max(1, int(tokens / TOKENS_PER_WORD))


def _text(rng: random.Random, words: list[str], cum_weights: list[float], count: int) -> str:
    picked = rng.choices(words, cum_weights=cum_weights, k=count)
    sentences, start = [], 0
    while start < count:
        end = min(count, start + rng.randint(6, 20))
        sentence = " ".join(picked[start:end])
        sentences.append(sentence[0].upper() + sentence[1:] + ".")
        start = end
    return " ".join(sentences)


def generate(spec: SyntheticPrefs, max_length: int) -> list[dict[str, str]]:
    """`spec.rows` prompt/chosen/rejected rows; prompt + either answer stays within ~max_length tokens."""
    rng = random.Random(spec.seed)
    words = lexicon(seed=spec.seed)
    cum_weights = list(itertools.accumulate(1.0 / (rank + 1) ** 1.1 for rank in range(len(words))))
    rows = []
    for _ in range(spec.rows):
        prompt_words = length_in_words(rng, spec.prompt_median_tokens, spec.sigma, max_length // 2)
        room = max(1, max_length - int(prompt_words * TOKENS_PER_WORD))
        chosen_words = length_in_words(rng, spec.answer_median_tokens, spec.sigma, room)
        rejected_words = length_in_words(rng, spec.answer_median_tokens, spec.sigma, room)
        rows.append(
            {
                "prompt": _text(rng, words, cum_weights, prompt_words),
                "chosen": " " + _text(rng, words, cum_weights, chosen_words),
                "rejected": " " + _text(rng, words, cum_weights, rejected_words),
            }
        )
    return rows
