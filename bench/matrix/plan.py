"""One cell on one profile with one workload, resolved once: the axes' table entries, the recipe it runs with, its
reference, its ranks and devices, why it does not apply (if so) and its GPU's catalog entry. Launch, the judge, the
estimator, the speed model and advise read these here rather than derive them again. Pure."""

from dataclasses import dataclass

from bench.matrix.backends import BackendSpec, backend_spec
from bench.matrix.cell import Cell
from bench.matrix.gpus import GpuSpec, entry_of
from bench.matrix.inits import InitSpec, init_spec
from bench.matrix.methods import MethodSpec, method_spec
from bench.matrix.on_profile import CellOnProfile
from bench.matrix.online_rules import vllm_left_out
from bench.matrix.precision import cuda_autocast, trains_pure_bf16
from bench.matrix.profiles import HardwareProfile, Workload
from bench.matrix.quants import QuantSpec, quant_spec
from bench.matrix.recipes import AppliedRecipe, Settings, resolve
from bench.matrix.reference import ReferencePlan, reference_plan
from bench.matrix.scenario import not_applicable_reason, target_reason


@dataclass(frozen=True)
class Plan:
    """What a cell is on a profile with a workload (`plan_for`)."""

    cell: Cell
    profile: HardwareProfile
    workload: Workload
    backend: BackendSpec
    init: InitSpec
    quant: QuantSpec
    method: MethodSpec
    recipe: AppliedRecipe
    """The recipe entries that match the cell on the profile's device (bench/matrix/recipes.py)."""
    reference: ReferencePlan
    world: int
    """Ranks the cell runs."""
    devices: int
    """Devices the cell occupies: one per rank, or all of a node's for one process that splits the model."""
    not_applicable: str | None
    """The first N/A rule that holds (bench/matrix/scenario.py), named; None: the cell applies."""
    gpu: GpuSpec | None
    """The profile's GPU catalog entry (scenarios/gpus.yaml); None on a CPU, or a GPU the catalog does not hold."""

    @property
    def on_profile(self) -> CellOnProfile:
        return CellOnProfile(self.cell, self.profile)

    @property
    def not_applicable_on_target(self) -> str | None:
        """`not_applicable` as a prediction for the target hardware judges it (bench/matrix/scenario.py
        `target_reason`: a `+vllm` row needs a CUDA target, not vLLM importable on this machine), and a `+vllm` row
        left out by `--vllm none`."""
        if self.not_applicable is not None and (reason := target_reason(self.on_profile)) is not None:
            return reason
        return vllm_left_out(self.cell, self.workload)

    @property
    def settings(self) -> Settings:
        return self.recipe.settings

    @property
    def device(self) -> str:
        return str(self.profile.device)

    @property
    def pure_bf16(self) -> bool:
        """Trained `--precision pure-bf16`: bf16 weights, no autocast, no fp32 copy (bench/matrix/precision.py)."""
        return trains_pure_bf16(self.profile.precision, self.workload.train.master_weights)

    @property
    def cuda_autocast(self) -> bool:
        """The forward runs under CUDA's autocast, which runs layer_norm and pow in fp32 (bench/matrix/precision.py)."""
        master = self.workload.train.master_weights is not False
        return cuda_autocast(self.device, self.profile.precision, master, self.backend.deepspeed is not None)

    @property
    def no_grad_forwards(self) -> int:
        """Forward passes per step without gradient of the cell's method, its reference as planned."""
        return self.method.no_grad_forwards(self.reference.precomputed)


def plan_for(cell: Cell, profile: HardwareProfile, workload: Workload) -> Plan:
    """`cell` on `profile` with `workload`, resolved: where a cell, a profile and a workload arrive from outside (the
    CLI, the runner), this is called once and the Plan is handed on."""
    applied = resolve(cell, profile.device)
    spec = backend_spec(cell.backend)
    on = CellOnProfile(cell, profile)
    world = on.world
    return Plan(
        cell=cell,
        profile=profile,
        workload=workload,
        backend=spec,
        init=init_spec(cell.init),
        quant=quant_spec(cell.quant),
        method=method_spec(cell.method),
        recipe=applied,
        reference=reference_plan(cell, applied.settings, workload),
        world=world,
        devices=spec.devices_per_cell(world, profile.device_count),
        not_applicable=not_applicable_reason(on),
        gpu=entry_of(profile.gpu, profile.card),
    )
