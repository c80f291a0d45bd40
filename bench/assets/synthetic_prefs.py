"""Synthetic preference pairs with realistic, long-tailed lengths and a learnable preference, for the
real-architecture workloads.

Text comes from a seeded lexicon of pseudo-words with a Zipf law, so a byte-level BPE trained on it behaves like a
real one; prompt and answer lengths are log-normal, capped to fit max_length, drawn from their own seeded stream.
The lexicon is dealt into two registers of the same shape: chosen answers use the preferred one, rejected the other.
A policy that learns raises the preferred register's words, which DPO's loss rewards at once, so a correct cell
shows a falling loss from random weights (bench/judge/learning.py); with no preference the loss would stay at ln 2
and every GPU cell would read `learning_failed`."""

import itertools
import random

from bench.matrix.profiles import SyntheticPrefs

TOKENS_PER_WORD = 1.3
"""Rough BPE tokens per pseudo-word; lengths below are converted to words with it."""
LEXICON_SIZE = 20_000
ONSETS = ["", "b", "br", "d", "f", "g", "k", "l", "m", "n", "p", "pl", "r", "s", "st", "t", "tr", "v", "z"]
VOWELS = ["a", "e", "i", "o", "u", "ai", "ou"]
CODAS = ["", "", "n", "r", "s", "t", "l", "m"]
ZIPF_EXPONENT = 1.1


def lexicon(size: int = LEXICON_SIZE, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words: set[str] = set()
    while len(words) < size:
        syllables = rng.choice([1, 2, 2, 3, 3, 4])
        words.add("".join(rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS) for _ in range(syllables)))
    return sorted(words)


def registers(words: list[str]) -> tuple[list[str], list[str]]:
    """(preferred, dispreferred): alternate words by frequency rank, so both follow the same Zipf law."""
    return words[0::2], words[1::2]


def zipf_weights(count: int) -> list[float]:
    return list(itertools.accumulate(1.0 / (rank + 1) ** ZIPF_EXPONENT for rank in range(count)))


def length_in_words(rng: random.Random, median_tokens: int, sigma: float, cap_tokens: int) -> int:
    tokens = min(cap_tokens, max(1, round(rng.lognormvariate(0.0, sigma) * median_tokens)))
    return max(1, int(tokens / TOKENS_PER_WORD))


def row_lengths(spec: SyntheticPrefs, max_length: int) -> list[tuple[int, int, int]]:
    """(prompt, chosen, rejected) words of each row, from the lengths' own seeded stream."""
    rng = random.Random(spec.seed)
    lengths = []
    for _ in range(spec.rows):
        prompt = length_in_words(rng, spec.prompt_median_tokens, spec.sigma, max_length // 2)
        room = max(1, max_length - int(prompt * TOKENS_PER_WORD))
        chosen = length_in_words(rng, spec.answer_median_tokens, spec.sigma, room)
        rejected = length_in_words(rng, spec.answer_median_tokens, spec.sigma, room)
        lengths.append((prompt, chosen, rejected))
    return lengths


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
    rng = random.Random(spec.seed + 1)  # the words' stream; the lengths have their own (row_lengths)
    words = lexicon(seed=spec.seed)
    preferred, dispreferred = registers(words)
    every, half = zipf_weights(len(words)), zipf_weights(len(preferred))
    rows = []
    for prompt, chosen, rejected in row_lengths(spec, max_length):
        rows.append(
            {
                "prompt": _text(rng, words, every, prompt),
                "chosen": " " + _text(rng, preferred, half, chosen),
                "rejected": " " + _text(rng, dispreferred, half, rejected),
            }
        )
    return rows
