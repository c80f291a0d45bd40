"""Where a cell's reference comes from, decided once: whether its log-probs are precomputed (TRL's
`precompute_ref_log_probs`) and whether a separate reference model is built and handed to the trainer. The worker
(its trainer arguments and the models it builds) and the estimator (memory and step time) read this and nothing else
(tests/unit/matrix/test_reference.py holds them to it). Pure."""

from dataclasses import dataclass

from bench.matrix.axes import Option
from bench.matrix.cell import Cell
from bench.matrix.inits import init_spec
from bench.matrix.methods import method_spec
from bench.matrix.profiles import Workload
from bench.matrix.recipes import Settings


@dataclass(frozen=True)
class ReferencePlan:
    precomputed: bool
    """The trainer's precompute_ref_log_probs: the reference's log-probs are computed once before training, and no
    step runs the reference's forward."""
    separate_model: bool
    """A separate reference model is built and passed as `ref_model` (two_models). TRL keeps a passed reference
    model also with precompute_ref_log_probs (it only drops one it would have created itself), so only the recipe's
    `reference: precomputed` (scenarios/recipes.yaml), which passes none, removes it."""


def can_be_precomputed(cell: Cell) -> bool:
    """The cell's method has a reference and its init mode's reference can be replaced by precomputed log-probs."""
    return method_spec(cell.method).reference and init_spec(cell.init).reference_can_be_precomputed


def reference_plan(cell: Cell, recipe: Settings, workload: Workload) -> ReferencePlan:
    """The reference of `cell` under its resolved recipe settings (`resolve(cell, device).settings`) and workload.

    Precomputed when the method has a reference and either the cell asks (the `precompute_ref` option), or its
    two_models recipe replaces the reference model by precomputed log-probs, or the workload asks (`precompute_ref`,
    `--precompute-ref on`) and the init mode's reference can be precomputed (not two_adapters' frozen `ref` adapter:
    bench/matrix/settings.py with_precomputed_reference gives such cells the option)."""
    method, init = method_spec(cell.method), init_spec(cell.init)
    separate = method.reference and init.reference == "separate_model"
    recipe_drops_model = separate and recipe.reference == "precomputed"
    precomputed = method.reference and (
        Option.PRECOMPUTE_REF in cell.options
        or recipe_drops_model
        or (workload.train.precompute_ref and can_be_precomputed(cell))
    )
    return ReferencePlan(precomputed=precomputed, separate_model=separate and not recipe_drops_model)
