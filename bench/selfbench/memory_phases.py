"""Where a CPU cell's memory goes, phase by phase: the measurement behind the estimator's CPU process terms
(docs/estimator.md, "CPU process terms"; docs/evidence/cpu-process-terms.md).

One single-process cell, trained the worker's way, in a child inside a memory cgroup of its own (else RSS only). A
sampler thread reads the cgroup and the anonymous RSS every millisecond and keeps each phase's peak (TRL's fused head
forward / backward, the accelerator's backward, the optimizer step). `--mode`: `plain` (process figures only),
`profiler` (torch.profiler's live tensors too) or `tracemalloc` (Python-heap growth by file).

    python -m bench selfbench memory-phases --cell one_adapter-none-single --workload small --mode profiler
"""

import argparse
import contextlib
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.units import GiB, MiB

PROBE_LIMIT = 4 * GiB


@dataclass
class Snapshot:
    """Process memory at one moment, MiB."""

    rss_anon: float
    rss_file: float
    cgroup: float | None
    malloc_in_use: float | None
    """glibc mallinfo2: uordblks (bytes handed out from the arenas) + hblkhd (mmapped chunks)."""
    malloc_free_kept: float | None
    """glibc mallinfo2 fordblks: freed bytes the arenas keep (not returned to the kernel)."""
    malloc_mmapped: float | None


def _status_mib(text: str, key: str) -> float:
    for line in text.splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")
    ] + [("keepcost", ctypes.c_size_t)]


def mallinfo() -> dict[str, float] | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _Mallinfo2
    except (OSError, AttributeError):
        return None
    info = libc.mallinfo2()
    return {name: getattr(info, name) / MiB for name, _ in _Mallinfo2._fields_}


def snapshot(cgroup_usage: Callable[[], int | None]) -> Snapshot:
    status = Path("/proc/self/status").read_text()
    info = mallinfo()
    usage = cgroup_usage()
    return Snapshot(
        rss_anon=_status_mib(status, "RssAnon"),
        rss_file=_status_mib(status, "RssFile"),
        cgroup=None if usage is None else usage / MiB,
        malloc_in_use=None if info is None else info["uordblks"] + info["hblkhd"],
        malloc_free_kept=None if info is None else info["fordblks"],
        malloc_mmapped=None if info is None else info["hblkhd"],
    )


@dataclass
class PhasePeaks:
    """The sampler's peaks per phase (MiB): cgroup usage and anonymous RSS."""

    cgroup: dict[str, float] = field(default_factory=dict)
    rss_anon: dict[str, float] = field(default_factory=dict)


class Sampler:
    """Polls the cgroup usage and RssAnon; the current phase is whatever `phase` says when a sample is taken."""

    def __init__(self, cgroup_file: Path | None, period_s: float = 0.001) -> None:
        self.cgroup_file = cgroup_file
        self.period_s = period_s
        self.phase = "load"
        self.peaks = PhasePeaks()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        statm = Path("/proc/self/status")
        while not self._stop.is_set():
            phase = self.phase
            anon = _status_mib(statm.read_text(), "RssAnon")
            self.peaks.rss_anon[phase] = max(self.peaks.rss_anon.get(phase, 0.0), anon)
            if self.cgroup_file is not None:
                usage = int(self.cgroup_file.read_text()) / MiB
                self.peaks.cgroup[phase] = max(self.peaks.cgroup.get(phase, 0.0), usage)
            time.sleep(self.period_s)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> PhasePeaks:
        self._stop.set()
        self._thread.join()
        return self.peaks


@contextlib.contextmanager
def marked(sampler: Sampler, phase: str, profiling: bool) -> Iterator[None]:
    """Set the sampler's phase (and a profiler range named phase:<name>) for the duration, then restore it."""
    import torch

    before, sampler.phase = sampler.phase, phase
    try:
        if profiling:
            with torch.profiler.record_function(f"phase:{phase}"):
                yield
        else:
            yield
    finally:
        sampler.phase = before


def instrument(sampler: Sampler, trainer: Any, profiling: bool) -> None:
    """Wrap TRL's fused LM head, the accelerator's backward and every optimizer step in phase marks."""
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
    from trl.kernels import chunked_logprob

    function = chunked_logprob.ChunkedLogProbFunction
    forward, backward = function.forward, function.backward

    def head_forward(*args: Any, **kwargs: Any) -> Any:
        with marked(sampler, "head_forward", profiling):
            return forward(*args, **kwargs)

    def head_backward(*args: Any, **kwargs: Any) -> Any:
        with marked(sampler, "head_backward", profiling):
            return backward(*args, **kwargs)

    function.forward, function.backward = staticmethod(head_forward), staticmethod(head_backward)
    accelerator_backward = trainer.accelerator.backward

    def marked_backward(*args: Any, **kwargs: Any) -> Any:
        with marked(sampler, "backward", profiling):
            return accelerator_backward(*args, **kwargs)

    trainer.accelerator.backward = marked_backward
    previous: list[str] = []

    def pre(*_: Any) -> None:
        previous.append(sampler.phase)
        sampler.phase = "optimizer_step"

    def post(*_: Any) -> None:
        sampler.phase = previous.pop() if previous else "step"

    register_optimizer_step_pre_hook(pre)
    register_optimizer_step_post_hook(post)


def tensor_timeline(trace: dict[str, Any]) -> dict[str, Any]:
    """From a torch.profiler chrome trace: the peak of CPU tensor bytes allocated while profiling (`Total
    Allocated` of the `[memory]` events, device type 0) and the innermost phase:<name> range that holds it."""
    events = trace.get("traceEvents", [])
    memory = [e for e in events if e.get("name") == "[memory]" and e.get("args", {}).get("Device Type") == 0]
    if not memory:
        return {"tensor_peak": None, "tensor_peak_phase": None}
    top = max(memory, key=lambda e: e["args"]["Total Allocated"])
    ranges = [
        e
        for e in events
        if e.get("ph") == "X"
        and str(e.get("name", "")).startswith("phase:")
        and e["ts"] <= top["ts"] <= e["ts"] + e["dur"]
    ]
    inner = min(ranges, key=lambda e: e["dur"], default=None)
    per_phase: dict[str, float] = {}
    for r in (e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("phase:")):
        inside = [m["args"]["Total Allocated"] for m in memory if r["ts"] <= m["ts"] <= r["ts"] + r["dur"]]
        if inside:
            name = r["name"].removeprefix("phase:")
            per_phase[name] = max(per_phase.get(name, 0.0), max(inside) / MiB)
    before = [m["args"]["Total Allocated"] for m in memory if inner is not None and m["ts"] < inner["ts"]]
    return {
        "tensor_peak": top["args"]["Total Allocated"] / MiB,
        "tensor_at_peak_phase_start": before[-1] / MiB if before else None,
        "tensor_peak_phase": None if inner is None else inner["name"].removeprefix("phase:"),
        "tensor_peak_by_phase": per_phase,
    }


def _top_files(diff: list[Any], n: int = 12) -> list[tuple[str, float]]:
    by_file: dict[str, float] = {}
    for stat in diff:
        name = stat.traceback[0].filename
        parts = Path(name).parts
        key = "/".join(parts[parts.index("site-packages") + 1 :][:2]) if "site-packages" in parts else name
        by_file[key] = by_file.get(key, 0.0) + stat.size_diff / MiB
    return sorted(by_file.items(), key=lambda kv: -kv[1])[:n]


def _rank_usage_file(cell_dir: str | None) -> Path | None:
    """The probe rank's memory usage file (cgroup v1, else v2); None without a cgroup."""
    if not cell_dir:
        return None
    v1 = Path(cell_dir) / "rank0" / "memory.usage_in_bytes"
    return v1 if v1.exists() else Path(cell_dir) / "rank0" / "memory.current"


def _figures(spec: Any, mode: str, snapshots: dict[str, "Snapshot"], peaks: Any) -> dict[str, Any]:
    """The snapshots and each phase's peaks above the baseline snapshot, MiB."""
    baseline = snapshots["baseline"]
    return {
        "cell": spec.cell.id,
        "workload": spec.workload.name,
        "mode": mode,
        "snapshots": {k: asdict(v) for k, v in snapshots.items()},
        "phase_peaks_cgroup": {k: v - (baseline.cgroup or 0.0) for k, v in peaks.cgroup.items()},
        "phase_peaks_rss_anon": {k: v - baseline.rss_anon for k, v in peaks.rss_anon.items()},
    }


def child(args: argparse.Namespace) -> dict[str, Any]:
    from bench.isolation import cgroups

    cgroups.join_rank(0, os.environ)  # first: everything after is charged to the probe's cgroup
    import torch

    from bench.worker.build import import_libraries, trl_trainer

    spec = _spec(args)
    torch.set_num_threads(spec.profile.threads_per_process)
    cgroup_file = _rank_usage_file(os.environ.get(cgroups.CELL_ENV))

    def usage() -> int | None:
        return int(cgroup_file.read_text()) if cgroup_file is not None else None

    import_libraries(spec)
    for name in args.preimport:
        __import__(name)
    from transformers import TrainerCallback

    baseline = snapshot(usage)
    sampler = Sampler(cgroup_file)
    snapshots: dict[str, Snapshot] = {"baseline": baseline}
    profiling = args.mode == "profiler"
    if args.mode == "tracemalloc":
        import tracemalloc

        tracemalloc.start()
        traced = [tracemalloc.take_snapshot()]
    profiler = _started_profiler() if profiling else None
    sampler.start()

    class Steps(TrainerCallback):
        def on_step_begin(self, *_: Any, **__: Any) -> None:
            sampler.phase = "step"

        def on_step_end(self, _args: Any, state: Any, *__: Any, **___: Any) -> None:
            if state.global_step in (1, spec.workload.train.steps):
                snapshots[f"after_step_{state.global_step}"] = snapshot(usage)

    trainer = _built_in_steps(spec, [Steps()], snapshots, usage) if args.build_steps else trl_trainer(spec, [Steps()])
    snapshots["built"] = snapshot(usage)
    if args.mode == "tracemalloc":
        traced.append(tracemalloc.take_snapshot())
    instrument(sampler, trainer, profiling)
    trainer.train()
    peaks = sampler.stop()
    result = _figures(spec, args.mode, snapshots, peaks)
    if profiler is not None:
        profiler.__exit__(None, None, None)
        trace_file = Path(args.trace or Path(args.out_dir) / "trace.json")
        profiler.export_chrome_trace(str(trace_file))
        result.update(tensor_timeline(json.loads(trace_file.read_text())))
    if args.mode == "tracemalloc":
        result.update(_heap_growth(traced[0], traced[1], tracemalloc.take_snapshot()))
    return result


def _started_profiler() -> Any:
    """torch.profiler recording CPU memory events, started."""
    from torch.profiler import ProfilerActivity, profile

    profiler = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    profiler.__enter__()
    return profiler


def _heap_growth(start: Any, built: Any, end: Any) -> dict[str, Any]:
    """Python-heap growth by file (tracemalloc snapshots) while the trainer was built and while it trained."""
    return {
        "python_heap_build": _top_files(built.compare_to(start, "filename")),
        "python_heap_train": _top_files(end.compare_to(built, "filename")),
        "python_heap_total": sum(s.size_diff for s in end.compare_to(start, "filename")) / MiB,
    }


def _built_in_steps(spec: Any, callbacks: list[Any], snapshots: dict[str, Snapshot], usage: Any) -> Any:
    """bench/worker/trainers/dpo.py's trainer, one piece at a time, with a snapshot after each piece."""
    from datasets import load_from_disk
    from transformers import AutoTokenizer
    from trl import DPOTrainer

    from bench.worker import trainers
    from bench.worker.models import build_models
    from bench.worker.trainers import dpo

    args = dpo.config(spec)
    snapshots["config"] = snapshot(usage)
    tokenizer = AutoTokenizer.from_pretrained(spec.assets.tokenizer)
    snapshots["tokenizer"] = snapshot(usage)
    dataset = load_from_disk(spec.assets.dataset)
    snapshots["dataset"] = snapshot(usage)
    built = build_models(spec)
    snapshots["models"] = snapshot(usage)
    return trainers.assemble(DPOTrainer, args, built, tokenizer, dataset, callbacks, reference=True)


def _spec(args: argparse.Namespace) -> Any:
    from bench.assets.prepare import cell_dataset, prepare
    from bench.matrix.backends import backend_spec
    from bench.matrix.methods import method_spec
    from bench.matrix.plan import plan_for
    from bench.matrix.profiles import load_profile, load_workload
    from bench.run.launch import deepspeed_config
    from bench.selfbench.plain_dpo import matrix_cell
    from bench.worker.spec import WorkerSpec

    cell = matrix_cell(args.cell)
    if cell is None:
        raise SystemExit(f"unknown cell {args.cell!r}; `python -m bench list` shows the cell ids")
    profile = load_profile(args.hw)
    workload = load_workload(args.workload or profile.workload)
    assets = prepare(workload)
    rows = assets.dataset_for(method_spec(cell.method).data)  # the method's form: SFT's completions, KTO's unpaired
    assets = assets.model_copy(update={"dataset": cell_dataset(rows, Path(args.out_dir) / "dataset")})
    deepspeed = None
    if backend_spec(cell.backend).deepspeed is not None:  # one rank of the cell's DeepSpeed config
        deepspeed = str(Path(args.out_dir) / "deepspeed.json")
        Path(deepspeed).write_text(json.dumps(deepspeed_config(backend_spec(cell.backend))), encoding="utf-8")
    return WorkerSpec.from_plan(plan_for(cell, profile, workload), assets, args.out_dir, deepspeed_config=deepspeed)


def parent(args: argparse.Namespace, argv: list[str]) -> int:
    from bench.executors.local import extensions_dir
    from bench.isolation import cgroups
    from bench.run.launch import free_port

    # one rank of a process group of one, for the DeepSpeed backends (harmless for the others)
    rank = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}
    os.environ.update({**rank, "MASTER_PORT": str(free_port()), "TORCH_EXTENSIONS_DIR": extensions_dir()})
    with tempfile.TemporaryDirectory(prefix="memory_phases-") as out_dir:
        command = [sys.executable, "-m", "bench.selfbench.memory_phases", *argv, "--child", "--out-dir", out_dir]
        try:
            scope = cgroups.cell_cgroups(f"probe-{os.getpid()}", 1, PROBE_LIMIT)
            group = scope.__enter__()
        except cgroups.CgroupUnavailable as exc:
            print(f"note: no memory cgroup ({exc}); RSS figures only", file=sys.stderr)
            return subprocess.run(command, check=False).returncode
        try:
            return subprocess.run(command, env={**os.environ, **group.env}, check=False).returncode
        finally:
            scope.__exit__(None, None, None)


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cell", default="one_adapter-none-single", help="a cell id of the single backend")
    parser.add_argument("--hw", default="cpu")
    parser.add_argument("--workload", default=None)
    parser.add_argument("--mode", choices=["plain", "profiler", "tracemalloc"], default="plain")
    parser.add_argument("--build-steps", action="store_true", help="snapshot after each piece of the DPO trainer")
    parser.add_argument("--preimport", nargs="*", default=[], help="modules imported before the baseline")
    parser.add_argument("--trace", default=None, help="profiler mode: keep the chrome trace here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out-dir", default=None, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    """The parent measures in a child of its own (`--child`), which prints its phases as JSON."""
    if not args.child:
        return parent(args, args.argv)
    print(json.dumps(child(args)))
    return 0


def main(argv: list[str] | None = None) -> int:
    """The tool as a process of its own: the measuring child `run` starts."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="python -m bench.selfbench.memory_phases", description=__doc__.splitlines()[0]
    )
    arguments(parser)
    args = parser.parse_args(argv)
    args.argv = argv
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
