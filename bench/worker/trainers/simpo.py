"""SimPO: trl.experimental.cpo's CPOTrainer with loss_type="simpo" and cpo_alpha=0 (no NLL term: SimPO as in TRL's
docs), over the pairs, no reference."""

from typing import Any

from bench.worker.models import build_models
from bench.worker.spec import WorkerSpec
from bench.worker.trainer_args import common_arguments
from bench.worker.trainers import assemble, inputs

BETA = 2.0
"""SimPO's reward scale, the low end of the 2-10 the SimPO authors train with (Meng et al. 2024); at the workload's
DPO beta of 0.1 its loss stayed within noise of softplus(gamma) (measured on tiny: 0.972 at step 1, 0.973 at 30)."""


def arguments(spec: WorkerSpec) -> dict[str, Any]:
    """CPOConfig's keyword arguments (also what an exported recipe writes)."""
    return common_arguments(spec) | {"loss_type": "simpo", "cpo_alpha": 0.0, "beta": BETA}


def trainer(spec: WorkerSpec, callbacks: list[Any]) -> Any:
    from trl.experimental.cpo import CPOConfig, CPOTrainer

    args = CPOConfig(**arguments(spec))
    tokenizer, dataset = inputs(spec)
    return assemble(CPOTrainer, args, build_models(spec), tokenizer, dataset, callbacks, reference=False)
