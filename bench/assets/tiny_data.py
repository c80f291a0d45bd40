"""The shipped tiny preference dataset (scenarios/data/tiny_prefs): a seeded, reproducible generator.

Rows are prompt/chosen/rejected strings with a long-tailed length distribution, like real preference data:
chosen answers tend to be longer and on topic, rejected ones shorter or off topic.
"""

import json
import random
from pathlib import Path

TOPICS = {
    "bread": ["flour", "yeast", "oven", "dough", "crust", "knead", "rise", "salt"],
    "bicycle": ["chain", "brake", "tyre", "gear", "saddle", "pedal", "spoke", "frame"],
    "garden": ["soil", "seed", "water", "compost", "sun", "root", "leaf", "weed"],
    "python": ["function", "list", "loop", "module", "test", "class", "import", "error"],
    "sleep": ["night", "rest", "routine", "light", "screen", "tea", "pillow", "dream"],
    "budget": ["income", "rent", "saving", "expense", "plan", "month", "bill", "goal"],
}
VERBS = ["check", "start with", "keep", "adjust", "measure", "clean", "replace", "note", "compare", "repeat"]
FILLER = ["first", "then", "after that", "carefully", "every day", "if needed", "slowly", "again", "always"]
QUESTIONS = [
    "How do I take care of my {t}?",
    "What should I know about {t}?",
    "Any tips for {t} beginners?",
    "Why does my {t} keep failing?",
    "Explain {t} in simple words.",
]


def _sentence(rng: random.Random, words: list[str]) -> str:
    return f"{rng.choice(FILLER).capitalize()} {rng.choice(VERBS)} the {rng.choice(words)} and the {rng.choice(words)}."


def _answer(rng: random.Random, words: list[str], mean_sentences: float) -> str:
    count = max(1, min(12, int(rng.lognormvariate(0, 0.6) * mean_sentences)))
    return " ".join(_sentence(rng, words) for _ in range(count))


def generate(rows: int = 400, seed: int = 0) -> list[dict[str, str]]:
    rng = random.Random(seed)
    topics = sorted(TOPICS)
    data = []
    for _ in range(rows):
        topic = rng.choice(topics)
        other = rng.choice([t for t in topics if t != topic])
        prompt = rng.choice(QUESTIONS).format(t=topic)
        chosen = _answer(rng, TOPICS[topic], 3.0)
        rejected = _answer(rng, TOPICS[other] if rng.random() < 0.6 else TOPICS[topic], 1.5)
        data.append({"prompt": prompt, "chosen": " " + chosen, "rejected": " " + rejected})
    return data


def write_jsonl(rows: list[dict[str, str]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row, sort_keys=True) + "\n" for row in rows), encoding="utf-8")


if __name__ == "__main__":
    from bench.paths import SCENARIOS_DIR

    write_jsonl(generate(), SCENARIOS_DIR / "data" / "tiny_prefs" / "train.jsonl")
