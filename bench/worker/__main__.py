"""Entry point of one cell's worker process: `python -m bench.worker SPEC.json` (under any launcher).

Nothing imported before main() has told the process its rank in torch's variables imports torch (the fault module,
which does, is imported after)."""

if __name__ == "__main__":
    # The interpreter is up (a forked rank: the fork server's child has become this program): the rank's phases begin.
    from bench.worker import phases as _phases

    _phases.mark("main_start")
    # Before the imports below (seconds on a busy machine): this rank dies with its launcher, and with the runner
    # whoever is between them (bench/isolation/lifeline.py). A runner killed before this line is seen gone here.
    import os as _os

    from bench.isolation import lifeline as _lifeline

    _lifeline.die_with_parent(_os.getppid())
    _lifeline.die_with_runner(_os.environ)

import os
import socket
import sys
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from bench.isolation import fork_server_child
from bench.isolation.fork_server_client import FRESH_ENV
from bench.isolation.shm_segments import remove_group_segments
from bench.launchers import rank_from_env, torch_rank_env
from bench.results.schema import RssMoment
from bench.secrets import redact
from bench.worker import phases
from bench.worker.rank_report import RankReport
from bench.worker.spec import WorkerSpec

if TYPE_CHECKING:
    from bench.worker import faults
    from bench.worker.measure import StepRecorder
    from bench.worker.nvml import NvmlSampler


def launcher_rank(spec: WorkerSpec) -> int:
    """This process's global rank, as its launcher tells it (bench/launchers/)."""
    return rank_from_env(spec.cell.launcher, dict(os.environ))[0]


def rank_env_for(spec: WorkerSpec, environ: Mapping[str, str]) -> dict[str, str]:
    """torch's rank variables from the launcher's own (bench/launchers/ torch_rank_env), on accelerators only. On the
    CPU accelerate forms mpirun's group from OMPI_COMM_WORLD_* itself (get_cpu_distributed_information), the path
    every CPU run has taken; with torch's variables set as well, one mpirun cell in the docker CI stage hung in the
    gloo rendezvous (once; not reproduced in 5 runs after)."""
    return {} if spec.profile.device == "cpu" else torch_rank_env(spec.cell.launcher, environ)


def run(spec: WorkerSpec, report: RankReport, fault: "faults.Fault | None") -> None:
    import torch

    from bench.isolation import cgroups, step_marks
    from bench.worker import allocator_history, faults, memory
    from bench.worker.build import build_trainer, import_libraries
    from bench.worker.engage import observe
    from bench.worker.measure import StepRecorder, record_losses
    from bench.worker.trainers import trainer_module

    # the launch sets the threads (more for a host optimizer step: bench/run/launch.py host_threads)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS") or spec.profile.threads_per_process))
    started = time.perf_counter()
    import_libraries(spec)
    phases.mark("imported")
    report.baseline_rss_bytes = memory.current_rss_bytes()
    _split_rss(report, "baseline")
    report.baseline_cgroup_bytes = cgroups.own_usage_bytes() if os.environ.get(cgroups.CELL_ENV) else None
    devices, nvml_sampler = _own_devices(spec)
    recorder = StepRecorder(devices)
    callbacks = [recorder]
    if history_steps := allocator_history.start(devices is not None):  # before the model loads
        callbacks.append(allocator_history.history_callback(history_steps, spec.out_dir, launcher_rank(spec)))
    if fault:
        callbacks.append(faults.FaultCallback(fault, launcher_rank(spec)))
    spec = faults.drop_offload(fault, spec)
    trainer = build_trainer(spec, callbacks)
    faults.before_training(fault, trainer)
    record_losses(trainer, recorder)
    recorder.trainer = trainer
    recorder.on_first_step = lambda: setattr(report, "engagement", observe(trainer))
    report.rank = trainer.accelerator.process_index
    recorder.progress = step_marks.StepMarks(Path(spec.out_dir), report.rank)
    report.load_s = time.perf_counter() - started
    phases.mark("trainer_built")

    on_cuda = _read_load_peak(report, recorder, devices)
    trainer.train()
    recorder.progress.end()
    _record_training(report, recorder, nvml_sampler, on_cuda)
    evaluate = getattr(trainer_module(spec.cell.method), "evaluate", None)
    if evaluate is not None:  # after the peaks are read: what the learning check needs, not what training took
        report.pair_accuracy, report.pairs_evaluated = evaluate(spec, trainer)
    if spec.save_dir is not None:
        trainer.save_model(spec.save_dir)  # every rank calls it; the main process writes
    shutdown_distributed()


def start_torch() -> None:
    """Import torch and initialise its CUDA state, where the rank has CUDA, each a phase of its own: before the
    libraries, one of which (bitsandbytes, through peft) would otherwise initialise CUDA while it imports, as every
    fresh rank did."""
    import torch

    phases.mark("torch_imported")
    if torch.cuda.is_available():
        torch.cuda.init()
        phases.mark("cuda_init")


def _own_devices(spec: WorkerSpec) -> "tuple[list[int] | None, NvmlSampler | None]":
    """The CUDA devices this rank uses (None without CUDA), and the NVML sampler started on them where NVML is."""
    import torch

    from bench.worker.nvml import NvmlSampler, nvml_ids
    from bench.worker.placement import process_devices, splits_layers

    if not torch.cuda.is_available():
        return None, None
    local_rank = rank_from_env(spec.cell.launcher, dict(os.environ))[1]
    devices = process_devices(splits_layers(spec), torch.cuda.device_count(), local_rank)
    return devices, NvmlSampler.start_if_available(nvml_ids(os.environ.get("CUDA_VISIBLE_DEVICES"), devices))


def _read_load_peak(report: RankReport, recorder: "StepRecorder", devices: list[int] | None) -> bool:
    """The memory the load took (read now, or on CUDA when training begins), then the peaks reset for training's;
    whether the figures are CUDA's."""
    from bench.worker import memory

    on_cuda = memory.cuda_used()
    report.memory_kind = "cuda_allocated" if on_cuda else "rss"
    if on_cuda:
        # DeepSpeed and FSDP move the model onto the GPUs in trainer.train() (accelerator.prepare), after the build:
        # the GPU load peak is read when training begins, then reset
        def end_of_load() -> None:
            report.load_peak_bytes = memory.cuda_peaks(devices)[0]
            memory.reset_cuda_peaks(devices)

        recorder.on_train_start = end_of_load
    else:
        report.load_peak_bytes = memory.peak_rss_bytes()
    _split_rss(report, "loaded")
    memory.reset_peak_rss()
    return on_cuda


def _split_rss(report: RankReport, moment: RssMoment) -> None:
    """The rank's RSS by what backs it now, kept under `moment` (nothing where /proc does not split it)."""
    from bench.worker import memory

    if (parts := memory.rss_parts()) is not None:
        report.rss_parts[moment] = parts


def _record_training(
    report: RankReport, recorder: "StepRecorder", nvml_sampler: "NvmlSampler | None", on_cuda: bool
) -> None:
    """What the recorder saw of the steps, and the training peaks, into the rank's report."""
    from bench.worker import memory

    report.train_start = recorder.train_start
    report.step_ends, report.tokens, report.memory_now = recorder.step_ends, recorder.tokens, recorder.memory_now
    report.cpu_times = recorder.cpu_times
    report.losses, report.reward_accuracies = recorder.losses, recorder.reward_accuracies
    report.batch_widths = recorder.batch_widths
    report.sampled_rewards = recorder.sampled_rewards
    report.reward_parts = recorder.reward_parts
    report.host_peak_rss_bytes = memory.peak_rss_bytes()
    _split_rss(report, "trained")
    report.nvml_peak_bytes = nvml_sampler.stop() if nvml_sampler else None
    if on_cuda:
        report.train_peak_bytes, report.cuda_reserved_peak_bytes = memory.cuda_peaks(recorder.devices)
    else:
        report.train_peak_bytes = report.host_peak_rss_bytes


def shutdown_distributed() -> None:
    """Leave the process group cleanly: gloo aborts the interpreter at exit when it is left alive."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        remove_group_segments(os.environ)
        dist.destroy_process_group()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m bench.worker SPEC.json", file=sys.stderr)
        return 2
    spec = WorkerSpec.read(argv[1])
    os.environ.update(rank_env_for(spec, os.environ))
    phases.mark("process_start", phases.process_start())
    start_torch()
    # First of all: everything this rank allocates is charged to its own memory cgroup (when the cell has a budget).
    from bench.isolation import cgroups
    from bench.worker import faults

    cgroups.join_rank(launcher_rank(spec), os.environ)
    report = RankReport(
        rank=launcher_rank(spec),
        pid=os.getpid(),
        hostname=socket.gethostname(),
        forked=fork_server_child.FORKED,
        fresh_reason=os.environ.get(FRESH_ENV),
    )
    fault = faults.from_environment(spec.cell.id)
    try:
        run(spec, report, fault)
    except BaseException as exc:  # the runner classifies every failure from this record
        report.error = redact(f"{type(exc).__name__}: {exc}".strip())
        report.traceback_tail = redact("".join(traceback.format_exception(exc))[-4000:])
        finish(report).write(spec.rank_file(report.rank))
        raise
    finish(report).write(spec.rank_file(report.rank))
    faults.corrupt_report(fault, report.rank, spec.rank_file(report.rank))
    return 0


def finish(report: RankReport) -> RankReport:
    """The report with the rank's timeline, marked finished now: it is written, and the process leaves."""
    phases.mark("finished")
    report.phases = phases.timeline()
    return report


def leave(code: int) -> None:
    """Exit without interpreter finalization once the report is on disk.

    Library teardown at exit (gloo and c10d threads destroyed while still joinable) intermittently aborted a
    rank with "terminate called without an active exception" after its report was written, turning a finished
    cell into a crash at random. Nothing the cell measures happens after the report.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    leave(main(sys.argv))
