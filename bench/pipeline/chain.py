"""The pipeline's stages and the run of the chain (bench/pipeline/__init__.py)."""

import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, TextIO

from bench.assets.prepare import PreparedAssets
from bench.executors.base import Executor, LaunchPlan
from bench.files import write_whole
from bench.judge.stage import not_run_stage, step_stage, training_stage
from bench.matrix.axes import Backend, Init, Launcher, Method, Option, Quant
from bench.matrix.cell import Cell
from bench.matrix.profiles import HardwareProfile, Workload
from bench.results.schema import StageRecord, Status
from bench.results.store import now_iso
from bench.run.launch import write_files
from bench.run.one_cell import RunContext, run_cell
from bench.worker.pipeline_step import StepReport, StepSpec

PROMPT = "How do I take care of my garden?"
"""A prompt of the shipped tiny data; any text works for the synthetic workloads."""
NEW_TOKENS = 32
STAGES_DIR = "stages"


def _adapter_cell(method: Method, *options: Option) -> Cell:
    return Cell(
        method=method,
        init=Init.ONE_ADAPTER,
        quant=Quant.NONE,
        backend=Backend.SINGLE,
        launcher=Launcher.PYTHON,
        options=tuple(options),
    )


SFT_RATE = 0.2
"""The SFT stage trains at a fifth of the workload's rate, the DPO stage at the workload's own (its matrix cell's):
the guide's ratio (optimum-habana examples/trl: sft.py at --learning_rate 1e-4, then dpo.py at its default 5e-4).
Measured on tiny: after SFT at the full rate the merged model's attention gradients of log p(chosen) - log
p(rejected) were 4-9x smaller than the base model's, and DPO did not learn in 30 steps (0.6931 -> 0.6916, the
learning check's verdict `learning_failed`); after SFT at a fifth of it DPO fell to 0.58."""


ONLINE_RATE = 0.1
"""The rlhf pipeline's online stage trains the SFT model at a tenth of its matrix cell's rate. Measured on tiny (the
reward model at weight 0.1, scenarios/workloads/tiny.yaml): at the cell's rate the summed reward reached its top
within the first quarter and the rise stayed under the check's floor (0.78 -> 0.92, floor 0.16); at 0.3x it rose,
then fell back to 0.16 in the last quarter; at 0.1x and 0.2x it rose and held (GRPO 0.64 -> 0.95, RLOO 0.55 ->
0.87 at 0.1x). With the rule alone GRPO learned at the full rate (0.75 -> 1.0)."""


@dataclass(frozen=True)
class Stage:
    name: str
    kind: Literal["train", "merge", "generate"]
    cell: Cell | None = None
    rate: float = 1.0
    """Factor on the workload's learning rates for a training stage."""


@dataclass(frozen=True)
class Pipeline:
    name: str
    """What `--pipeline` and `make pipeline PIPELINE=` call it."""
    stages: tuple[Stage, ...]

    @property
    def title(self) -> str:
        """The stage kinds in order, as each stage record's `pipeline` names it: sft-merge-dpo-merge-generate."""
        return "-".join(s.name.split("_")[0] for s in self.stages)


def _rlhf(method: Method) -> Pipeline:
    """SFT, then a reward model trained on the SFT model, then online RL of the SFT model scored by that reward
    model (and the rule, bench/worker/rewards.py), as DeepSpeed-Chat's three steps with GRPO or RLOO as the third."""
    name = "rlhf" if method == Method.GRPO else f"rlhf-{method.value}"
    return Pipeline(
        name,
        (
            Stage("sft", "train", _adapter_cell(Method.SFT), SFT_RATE),
            Stage("merge_sft", "merge"),
            Stage("reward", "train", _adapter_cell(Method.REWARD)),
            Stage("merge_reward", "merge"),
            Stage(method.value, "train", _adapter_cell(method, Option.REWARD_MODEL), ONLINE_RATE),
            Stage(f"merge_{method.value}", "merge"),
            Stage("generate", "generate"),
        ),
    )


DPO_PIPELINE = Pipeline(
    "dpo",
    (
        Stage("sft", "train", _adapter_cell(Method.SFT), SFT_RATE),
        Stage("merge_sft", "merge"),
        Stage("dpo", "train", _adapter_cell(Method.DPO)),
        Stage("merge_dpo", "merge"),
        Stage("generate", "generate"),
    ),
)
PIPELINES = {p.name: p for p in (DPO_PIPELINE, _rlhf(Method.GRPO), _rlhf(Method.RLOO))}


@dataclass(frozen=True)
class Models:
    """What the stages so far have made: the policy the next stage trains or generates from, the adapter the last
    training stage saved (and its method), and the merged reward model an online stage scores with."""

    policy: str
    adapter: str | None = None
    adapter_method: Method | None = None
    reward_model: str | None = None

    def after(self, stage: Stage, output: str | None) -> "Models":
        """The models once `stage` has made `output`: a training stage's adapter; a merge's model, which is the
        reward model when the adapter was a reward model's and the next policy otherwise."""
        if stage.kind == "train":
            assert stage.cell is not None
            return replace(self, adapter=output, adapter_method=stage.cell.method)
        if stage.kind == "merge" and output is not None:
            if self.adapter_method == Method.REWARD:
                return replace(self, reward_model=output)
            return replace(self, policy=output)
        return self


def scaled(workload: Workload, factor: float) -> Workload:
    """The workload with both learning rates (full and LoRA) times `factor`."""
    if factor == 1.0:
        return workload
    lora_rate = workload.lora.learning_rate
    return workload.model_copy(
        update={
            "train": workload.train.model_copy(update={"learning_rate": workload.train.learning_rate * factor}),
            "lora": workload.lora.model_copy(
                update={"learning_rate": None if lora_rate is None else lora_rate * factor}
            ),
        }
    )


@dataclass
class PipelineContext:
    run_id: str
    run_dir: Path
    """results/<HW>/pipelines/<run-id>: the stage records, configs and logs."""
    work_dir: Path
    """build/pipelines/<HW>/<run-id>: the adapters and merged models the stages hand on (not results)."""
    profile: HardwareProfile
    workload: Workload
    assets: PreparedAssets
    executor: Executor
    launch_env: dict[str, str]
    pipeline: Pipeline = DPO_PIPELINE


def stage_file(run_dir: Path, record: StageRecord) -> Path:
    return run_dir / STAGES_DIR / f"{record.index}-{record.stage}.json"


def write_stage(run_dir: Path, record: StageRecord) -> None:
    """One stage's record, written whole (tmp + rename) the moment it ends: a crash loses no finished stage."""
    path = stage_file(run_dir, record)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_whole(path, record.model_dump_json(indent=1) + "\n")


def load_stages(run_dir: Path) -> list[StageRecord]:
    files = sorted((run_dir / STAGES_DIR).glob("*.json"), key=lambda p: int(p.name.split("-", 1)[0]))
    return [StageRecord.model_validate_json(p.read_text(encoding="utf-8")) for p in files]


def run_pipeline(ctx: PipelineContext, out: TextIO = sys.stdout) -> list[StageRecord]:
    """Every stage in order; the first that does not end ok stops the chain. A line per stage on `out`."""
    records: list[StageRecord] = []
    models = Models(ctx.assets.model)
    stopped: StageRecord | None = None
    stages = ctx.pipeline.stages
    for index, stage in enumerate(stages, start=1):
        base = StageRecord(
            run_id=ctx.run_id,
            pipeline=ctx.pipeline.title,
            index=index,
            stage=stage.name,
            kind=stage.kind,
            hardware=ctx.profile.name,
            workload=ctx.workload.name,
            status=Status.NOT_RUN,
        )
        output = ctx.work_dir / f"{index}-{stage.name}"
        if stopped is not None:
            record = not_run_stage(base, stopped, now_iso())
        else:
            record = (train if stage.kind == "train" else step)(ctx, base, stage, models, output)
            models = models.after(stage, record.output)
        write_stage(ctx.run_dir, record)
        records.append(record)
        wall = "" if record.wall_s is None else f" {record.wall_s:.1f}s"
        print(
            f"[{index}/{len(stages)}] {stage.name:<12} {record.status}{wall} {record.message[:100]}",
            file=out,
            flush=True,
        )
        if stopped is None and record.status != Status.OK:
            stopped = record
    return records


def train(ctx: PipelineContext, base: StageRecord, stage: Stage, models: Models, output: Path) -> StageRecord:
    """A training stage: its matrix cell on the current policy (with the trained reward model where the cell scores
    with one), the trained adapter saved to `output`."""
    from bench.estimate.gate import predictor
    from bench.matrix.plan import plan_for

    assert stage.cell is not None
    cell = stage.cell
    assets = ctx.assets.model_copy(update={"model": models.policy})
    reward_model = Path(models.reward_model) if Option.REWARD_MODEL in cell.options and models.reward_model else None
    run = RunContext(
        ctx.run_id,
        ctx.run_dir,
        ctx.profile,
        scaled(ctx.workload, stage.rate),
        assets,
        ctx.executor,
        ctx.launch_env,
        predict=predictor(ctx.profile, ctx.workload),
        save_dir=output,
        reward_model=reward_model,
    )
    prediction = run.predict(plan_for(cell, ctx.profile, ctx.workload)) if run.predict else None
    return training_stage(base, run_cell(run, cell, prediction=prediction), str(output))


def step(ctx: PipelineContext, base: StageRecord, stage: Stage, models: Models, output: Path) -> StageRecord:
    """A merge (the last adapter into the policy) or the generation from the policy, a process of its own."""
    folder = ctx.run_dir / "configs" / stage.name
    merge = stage.kind == "merge"
    spec = StepSpec(
        step="merge" if merge else "generate",
        model=models.policy,
        tokenizer=ctx.assets.tokenizer,
        report=str(folder / "report.json"),
        precision=ctx.profile.precision,
        device=ctx.profile.device,
        prompt=PROMPT,
        adapter=models.adapter if merge else None,
        task="sequence_classification" if merge and models.adapter_method == Method.REWARD else "causal_lm",
        output=str(output) if merge else None,
        new_tokens=NEW_TOKENS,
    )
    spec_path = folder / "spec.json"
    launch = LaunchPlan(
        argv=[ctx.executor.python, "-m", "bench.worker.pipeline_step", str(spec_path)],
        env=dict(ctx.launch_env),
        files={spec_path: json.dumps(spec.model_dump(), indent=1)},
    )
    write_files(launch, ctx.run_dir)
    Path(spec.report).unlink(missing_ok=True)
    (ctx.run_dir / "logs").mkdir(parents=True, exist_ok=True)
    labels = {"dpo-bench.run": ctx.run_id, "dpo-bench.cell": stage.name}
    started = now_iso()
    outcome = ctx.executor.run(launch, ctx.run_dir / "logs" / f"{stage.name}.log", ctx.profile.timeout_s, labels)
    report_path = Path(spec.report)
    report = StepReport.model_validate_json(report_path.read_text()) if report_path.is_file() else None
    timed = base.model_copy(update={"started_at": started, "finished_at": now_iso()})
    return step_stage(timed, outcome, report, spec.output)
