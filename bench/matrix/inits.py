"""The init-mode table: one entry per init mode, read by the N/A rules, the worker, engagement and the estimator."""

from dataclasses import dataclass
from typing import Literal

from bench.matrix.axes import Init

Reference = Literal["separate_model", "adapter_disabled", "ref_adapter"]


@dataclass(frozen=True)
class InitSpec:
    name: Init
    description: str
    reference: Reference
    """Where DPO's reference lives: a second model, the policy with its adapter disabled, or a frozen `ref` adapter."""
    adapter_names: frozenset[str]
    """The PEFT adapters the policy must carry (engagement); empty: full fine-tuning of every weight."""

    @property
    def adapters(self) -> bool:
        """The policy trains LoRA adapters, not its weights: its base can be quantized."""
        return bool(self.adapter_names)

    @property
    def adapter_copies(self) -> int:
        """Adapter weights held in memory: the trained one, plus its frozen `ref` copy for two_adapters."""
        return len(self.adapter_names)

    @property
    def reference_can_be_precomputed(self) -> bool:
        """precompute_ref replaces a `ref` adapter, so two_adapters would no longer be what is measured."""
        return self.reference != "ref_adapter"


INITS: dict[Init, InitSpec] = {
    spec.name: spec
    for spec in (
        InitSpec(
            Init.TWO_MODELS,
            "policy + separate reference model, every weight trained",
            reference="separate_model",
            adapter_names=frozenset(),
        ),
        InitSpec(
            Init.ONE_ADAPTER,
            "LoRA via peft_config; reference = the policy with its adapter disabled",
            reference="adapter_disabled",
            adapter_names=frozenset({"default"}),
        ),
        InitSpec(
            Init.TWO_ADAPTERS,
            "a PeftModel with adapter `default`; TRL adds a frozen copy `ref` as the reference",
            reference="ref_adapter",
            adapter_names=frozenset({"default", "ref"}),
        ),
    )
}


def init_spec(init: Init | str) -> InitSpec:
    return INITS[Init(init)]
