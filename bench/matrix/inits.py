"""The init-mode table: one entry per init mode, read by the N/A rules, the worker, engagement and the estimator.

An init mode says two things: what is trained (every weight, or a LoRA adapter) and where the reference lives for a
method that has one (bench/matrix/methods.py `reference`). `full` and `one_adapter` are the reference-free methods'
modes (`one_adapter`'s reference, the policy with its adapter disabled, costs nothing when no loss reads it);
`two_models`, `one_adapter` and `two_adapters` are DPO's and KTO's."""

from dataclasses import dataclass
from typing import Literal

from bench.matrix.axes import Init

Reference = Literal["none", "separate_model", "adapter_disabled", "ref_adapter"]

FULL_WEIGHTS = "full weights"
LORA_ADAPTER = "LoRA adapter"


@dataclass(frozen=True)
class InitSpec:
    name: Init
    description: str
    reference: Reference
    """Where a reference lives: nowhere (`full`: one model, for the reference-free methods), a second model, the
    policy with its adapter disabled, or a frozen `ref` adapter."""
    adapter_names: frozenset[str]
    """The PEFT adapters the policy must carry (engagement); empty: full fine-tuning of every weight."""

    @property
    def adapters(self) -> bool:
        """The policy trains LoRA adapters, not its weights: its base can be quantized."""
        return bool(self.adapter_names)

    @property
    def trains(self) -> str:
        """What the optimizer steps, in words: `full weights` or `LoRA adapter`."""
        return LORA_ADAPTER if self.adapters else FULL_WEIGHTS

    @property
    def holds_reference(self) -> bool:
        """The init mode builds a reference of its own (a model or a `ref` adapter) that only a method with a
        reference reads; `adapter_disabled` costs nothing, `none` holds none."""
        return self.reference in ("separate_model", "ref_adapter")

    @property
    def adapter_copies(self) -> int:
        """Adapter weights held in memory: the trained one, plus its frozen `ref` copy for two_adapters."""
        return len(self.adapter_names)

    @property
    def reference_can_be_precomputed(self) -> bool:
        """precompute_ref replaces a `ref` adapter, so two_adapters would no longer be what is measured; `full` has
        no reference to precompute."""
        return self.reference in ("separate_model", "adapter_disabled")


INITS: dict[Init, InitSpec] = {
    spec.name: spec
    for spec in (
        InitSpec(
            Init.FULL,
            "every weight trained; no reference (one model): the reference-free methods' full fine-tune",
            reference="none",
            adapter_names=frozenset(),
        ),
        InitSpec(
            Init.TWO_MODELS,
            "every weight trained; the reference is a separate frozen model (ref_model): DPO's and KTO's full "
            "fine-tune",
            reference="separate_model",
            adapter_names=frozenset(),
        ),
        InitSpec(
            Init.ONE_ADAPTER,
            "a LoRA adapter trained (peft_config); the reference is the policy with its adapter disabled",
            reference="adapter_disabled",
            adapter_names=frozenset({"default"}),
        ),
        InitSpec(
            Init.TWO_ADAPTERS,
            "a LoRA adapter `default` trained on a PeftModel; the reference is TRL's frozen copy of it, `ref`",
            reference="ref_adapter",
            adapter_names=frozenset({"default", "ref"}),
        ),
    )
}


def init_spec(init: Init | str) -> InitSpec:
    return INITS[Init(init)]
