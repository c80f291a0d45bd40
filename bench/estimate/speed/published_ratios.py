"""The published speed ratios the speed model must keep (docs/estimator.md, "Speed"): each pair of published rows
from one source that differ in the setting compared, its measured ratio of tokens/s and the PREDICTED one.

A pair is found by the rows' ids, never chosen by its error: the QLoRA row and the LoRA row of one source at the
same card and length (Qwen-7B's Q-LoRA and LoRA tables, torchtune's QLoRA and LoRA on the RTX 4090); a sharded row
with its parameters offloaded to the CPU and the same source's row without (Answer.AI's two RTX 4090s). The
offload rows ran at the larger batch the offload leaves room for (the source's own comparison), so that pair keeps
each row's batch: the ratio is what choosing offload gives, as the source ran it.
"""

from dataclasses import dataclass
from typing import Protocol

RATIO_GOAL = 0.15
"""The goal: each published ratio predicted within 15 %."""
SPEED_GOAL = 0.25
"""The goal for the rows themselves: at least ROW_SHARE_GOAL of them within 25 %."""
ROW_SHARE_GOAL = 0.70


class SpeedRowLike(Protocol):
    id: str
    measured_tokens_per_s: float
    predicted_tokens_per_s: float


@dataclass(frozen=True)
class RatioPair:
    setting: str
    """What differs: `qlora/lora`."""
    slow: str
    fast: str
    measured: float
    """The fast row's tokens/s over the slow row's, as measured."""
    predicted: float

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0


def _lora_twin(row_id: str) -> str | None:
    """The id of the LoRA row a QLoRA row pairs with, None for a row that is not a QLoRA one."""
    if "qlora-" in row_id:
        return row_id.replace("qlora-", "lora-")
    if ": QLoRA, " in row_id:
        return row_id.replace(": QLoRA, ", ": LoRA, ")
    return None


def _pair(setting: str, slow: SpeedRowLike, fast: SpeedRowLike) -> RatioPair:
    return RatioPair(
        setting,
        slow.id,
        fast.id,
        fast.measured_tokens_per_s / slow.measured_tokens_per_s,
        fast.predicted_tokens_per_s / slow.predicted_tokens_per_s,
    )


def qlora_pairs(rows: list[SpeedRowLike]) -> list[RatioPair]:
    """Every QLoRA row with its LoRA twin (same source, card and length): LoRA tokens/s over QLoRA tokens/s."""
    by_id = {r.id: r for r in rows}
    twins = [(slow, by_id.get(_lora_twin(slow.id) or "")) for slow in rows]
    return [_pair("qlora/lora", slow, fast) for slow, fast in twins if fast is not None]


OFFLOAD = " + CPU offload"
"""How a published row's id names the parameters offloaded to the CPU (scenarios/published/speeds.yaml)."""


def _without_batch(row_id: str) -> str:
    return row_id.rsplit(", batch ", 1)[0]


def offload_pairs(rows: list[SpeedRowLike]) -> list[RatioPair]:
    """Every offload row with the same source's row that differs only in the offload and its batch: tokens/s
    without offload over tokens/s with it."""
    plain = {_without_batch(r.id): r for r in rows if OFFLOAD not in r.id}
    twins = [(slow, plain.get(_without_batch(slow.id).replace(OFFLOAD, ""))) for slow in rows if OFFLOAD in slow.id]
    return [_pair("no offload/offload", slow, fast) for slow, fast in twins if fast is not None]


def within(rows: list[SpeedRowLike], goal: float = SPEED_GOAL) -> int:
    """Rows whose PREDICTED tokens/s is within `goal` of the measured."""
    return sum(abs(r.predicted_tokens_per_s / r.measured_tokens_per_s - 1.0) <= goal for r in rows)
