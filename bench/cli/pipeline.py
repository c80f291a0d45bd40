"""`pipeline`: a chain of training, merge and generation stages on this machine (bench/pipeline), one process per
stage: dpo (SFT -> merge -> DPO -> merge -> generate) or rlhf (SFT -> merge -> reward model -> merge -> GRPO or
RLOO scored by that reward model -> merge -> generate)."""

import argparse
from pathlib import Path

from bench.cli.common import run_id_of
from bench.errors import BenchError
from bench.matrix.profiles import load_profile, load_workload
from bench.paths import BUILD_DIR, PROJECT_ROOT

PIPELINES_DIR = "pipelines"
PIPELINE_NAMES = ("dpo", "rlhf", "rlhf-rloo")
"""bench/pipeline/chain.py PIPELINES' keys (a test holds them equal); named here so that `--help` imports no
pipeline code."""


def cmd_pipeline(args: argparse.Namespace) -> int:
    from bench.assets.prepare import prepare
    from bench.executors.docker_images import lock_file
    from bench.executors.local import LocalExecutor
    from bench.pipeline.chain import PIPELINES, PipelineContext, run_pipeline
    from bench.report.pipeline_row import stages_table
    from bench.results.env import environment_fingerprint, write_env
    from bench.run.preflight import preflight

    scenarios = Path(args.scenarios)
    profile = load_profile(args.hw, scenarios)
    workload = load_workload(args.model or profile.workload, scenarios)
    if profile.nodes > 1:
        raise BenchError(f"profile {profile.name} spans {profile.nodes} nodes: the pipeline runs on one machine")
    machine = preflight(profile, emulate=False)
    if machine.untested_reason:
        raise BenchError(f"cannot run the pipeline here: {machine.untested_reason}")
    run_id = run_id_of(args)
    run_dir = Path(args.results) / profile.name / PIPELINES_DIR / run_id
    if run_dir.exists():
        raise BenchError(
            f"{run_dir} exists: a pipeline run is not resumed (its models are gone); pick another --run-id"
        )
    print(f"preparing workload {workload.name} (model, tokenizer, dataset) ...", flush=True)
    assets = prepare(workload)
    run_dir.mkdir(parents=True)
    executor = LocalExecutor(cwd=PROJECT_ROOT, memory_budget_bytes=profile.memory_budget_bytes)
    write_env(
        run_dir,
        environment_fingerprint(profile.name, workload.name, executor.name, lock_file(profile.image_flavor), None),
    )
    ctx = PipelineContext(
        run_id,
        run_dir,
        BUILD_DIR / PIPELINES_DIR / profile.name / run_id,
        profile,
        workload,
        assets,
        executor,
        machine.launch_env,
        PIPELINES[args.pipeline],
    )
    records = run_pipeline(ctx)
    print(stages_table(records))
    return 0 if all(r.status == "ok" for r in records) else 1


def register(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser(
        "pipeline",
        help="SFT (LoRA) -> merge -> DPO (or a reward model, then GRPO/RLOO scored by it) -> merge -> generate, "
        "each stage a process with its own record (docs/pipeline.md)",
    )
    p.add_argument(
        "--pipeline",
        default="dpo",
        choices=PIPELINE_NAMES,
        help="dpo: SFT then DPO; rlhf: SFT, a reward model, then GRPO scored by it; rlhf-rloo: the same with RLOO",
    )
    p.add_argument("--hw", default="cpu")
    p.add_argument("--model", default=None, metavar="WORKLOAD", help="the workload to run (default: the profile's)")
    p.add_argument("--run-id", default=None, help="name of the run (default: the UTC time)")
    p.set_defaults(func=cmd_pipeline)
