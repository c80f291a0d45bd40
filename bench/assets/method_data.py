"""Each training method's rows, derived from the workload's preference pairs (bench/matrix/methods.py `data`), so
every method trains on the same prompts and answers. Pure."""

from collections.abc import Iterable, Mapping

Pair = Mapping[str, str]


def completions(pairs: Iterable[Pair]) -> list[dict[str, str]]:
    """SFT: each prompt with its chosen answer (TRL's prompt-completion form: the loss is on the completion)."""
    return [{"prompt": p["prompt"], "completion": p["chosen"]} for p in pairs]


def unpaired(pairs: Iterable[Pair]) -> list[dict[str, str | bool]]:
    """KTO: each pair as a desirable (chosen) and an undesirable (rejected) row, interleaved.

    KTOTrainer samples sequentially (its KL batch pairs each prompt with a neighbour's completion), and TRL's own
    `unpair_preference_dataset` puts every chosen row of a 1,000-row map batch before every rejected one: a short
    run would then see desirable rows only. Interleaved, every batch of an even size holds as many of each."""
    rows: list[dict[str, str | bool]] = []
    for p in pairs:
        rows.append({"prompt": p["prompt"], "completion": p["chosen"], "label": True})
        rows.append({"prompt": p["prompt"], "completion": p["rejected"], "label": False})
    return rows


def prompts(pairs: Iterable[Pair]) -> list[dict[str, str]]:
    """GRPO, RLOO: the prompts alone; the trainer samples its completions from the policy."""
    return [{"prompt": p["prompt"]} for p in pairs]


FORMS = {"completions": completions, "unpaired": unpaired, "prompts": prompts}
"""The derived forms; `pairs` is the workload's dataset itself."""
