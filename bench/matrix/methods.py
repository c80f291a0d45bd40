"""The training-method table: one entry per method, naming its TRL trainer and the worker stage that builds it
(bench/worker/stages/<stage>.py). A new method is its enum value, one entry here and its stage module."""

from dataclasses import dataclass

from bench.matrix.axes import Method


@dataclass(frozen=True)
class MethodSpec:
    name: Method
    trainer: str
    """The trainer class's import path, as the matrix shows it."""
    reference: bool
    """The loss compares the policy with a reference (DPO, KTO); reference-free methods have no init mode that
    places one."""
    stage: str
    """The worker module that builds the trainer: bench.worker.stages.<stage>."""
    experimental: bool = False
    """The trainer lives in trl.experimental."""


METHODS: dict[Method, MethodSpec] = {
    spec.name: spec for spec in (MethodSpec(Method.DPO, trainer="trl.DPOTrainer", reference=True, stage="dpo"),)
}


def method_spec(method: Method | str) -> MethodSpec:
    return METHODS[method]  # a Method is its string: either key finds the entry
