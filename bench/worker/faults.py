"""Test-only fault injection, off unless BENCH_FAULT is set: `BENCH_FAULT=<fault>[@rank<R>][:step<S>]`, limited to
cell ids matching BENCH_FAULT_CELL. Faults fire on rank R (default 0) at the end of step S (default 3) with real
signals, allocations and exceptions, so that the suite's handling of them is tested end to end. What each of FAULTS
does: docs/faults.md."""

import atexit
import fnmatch
import os
import re
import resource
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from bench.units import GiB, MiB

FAULT_ENV = "BENCH_FAULT"
FAULT_CELL_ENV = "BENCH_FAULT_CELL"
"""Optional glob over cell ids: the fault fires only in matching cells."""
FAULT_DELAY_ENV = "BENCH_FAULT_DELAY_MS"
"""slow_step's extra CPU time per step, in milliseconds (default DEFAULT_DELAY_MS)."""
DEFAULT_DELAY_MS = 10.0
_SPEC = re.compile(r"^(?P<fault>[a-z_]+)(@rank(?P<rank>\d+))?(:step(?P<step>\d+))?$")
FAULTS = (
    "sigkill",
    "hang",
    "host_oom",
    "cuda_oom",
    "bad_result",
    "leak_secret",
    "abort_at_exit",
    "wrong_reference",
    "constant_reward_head",
    "zero_learning_rate",
    "nan_loss",
    "slow_step",
    "drop_offload",
)
PERTURBATION_STD = 0.1


@dataclass(frozen=True)
class Fault:
    kind: str
    rank: int = 0
    step: int = 3


def from_environment(cell_id: str) -> Fault | None:
    target = os.environ.get(FAULT_CELL_ENV)
    if target and not fnmatch.fnmatchcase(cell_id, target):
        return None
    return parse(os.environ.get(FAULT_ENV))


def parse(value: str | None) -> Fault | None:
    if not value:
        return None
    match = _SPEC.match(value)
    if not match or match["fault"] not in FAULTS:
        raise ValueError(f"{FAULT_ENV}={value!r}: expected <fault>[@rank<R>][:step<S>], fault one of {FAULTS}")
    return Fault(match["fault"], int(match["rank"] or 0), int(match["step"] or 3))


def delay_s() -> float:
    """slow_step's delay from BENCH_FAULT_DELAY_MS, in seconds."""
    text = os.environ.get(FAULT_DELAY_ENV, "")
    try:
        value = float(text) if text else DEFAULT_DELAY_MS
    except ValueError:
        raise ValueError(f"{FAULT_DELAY_ENV}={text!r}: expected milliseconds, e.g. 10") from None
    if value < 0:
        raise ValueError(f"{FAULT_DELAY_ENV}={text!r}: must be >= 0")
    return value / 1000


def spin(seconds: float) -> None:
    """Burn `seconds` of this thread's CPU time (not wall time: descheduled time does not count)."""
    deadline = time.thread_time() + seconds
    while time.thread_time() < deadline:
        pass


def fire(kind: str) -> None:
    if kind == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif kind == "hang":
        while True:
            time.sleep(60)
    elif kind == "host_oom":
        in_use = int(Path("/proc/self/statm").read_text().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (in_use + 256 * MiB, resource.RLIM_INFINITY))
        bytearray(2 * GiB)
    elif kind == "cuda_oom":
        import torch

        raise torch.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 22.05 GiB "
            "of which 1.12 GiB is free."
        )
    elif kind == "abort_at_exit":
        atexit.register(os.abort)
    elif kind == "leak_secret":
        token = os.environ.get("HF_TOKEN", "")
        print(f"debug: using token {token}", flush=True)
        raise RuntimeError(f"authentication failed for token {token}")


def poison_parameter(model: Any) -> None:
    """Fill the first trainable (non-partitioned) parameter with NaN."""
    import torch

    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.requires_grad and parameter.numel() > 0:
                parameter.fill_(float("nan"))
                return


BEFORE_TRAINING = frozenset({"wrong_reference", "constant_reward_head", "zero_learning_rate"})
"""Faults applied to the built trainer on every rank (DDP would otherwise broadcast rank 0's untouched model)."""


def before_training(fault: Fault | None, trainer: Any) -> None:
    if fault is None or fault.kind not in BEFORE_TRAINING:
        return
    if fault.kind == "wrong_reference":
        corrupt_reference(trainer)
    elif fault.kind == "constant_reward_head":
        freeze_reward_head(trainer)
    else:
        trainer.args.learning_rate = 0.0  # the optimizer and its schedule are built from it when training starts


def freeze_reward_head(trainer: Any) -> None:
    import torch

    from bench.worker.stages.reward import HEADS, head_parameters

    head = head_parameters(trainer.model)
    if not head:
        raise RuntimeError(f"constant_reward_head: the model has no head named {' or '.join(HEADS)}")
    with torch.no_grad():
        for parameter in head:
            parameter.zero_()
            parameter.requires_grad_(False)


def corrupt_reference(trainer: Any) -> None:
    import torch

    generator = torch.Generator().manual_seed(1234)
    if getattr(trainer, "ref_model", None) is not None:
        targets = [p for p in trainer.ref_model.parameters() if p.numel() > 0]
    else:
        targets = [p for n, p in trainer.model.named_parameters() if "lora_B.default" in n and p.numel() > 0]
    if not targets:
        raise RuntimeError("wrong_reference: no reference weights or LoRA B of adapter `default` to perturb")
    with torch.no_grad():
        for parameter in targets:
            noise = torch.empty(parameter.shape, dtype=torch.float32).normal_(0, PERTURBATION_STD, generator=generator)
            parameter.add_(noise.to(parameter.dtype))


ACCELERATE_DEEPSPEED_FILE_ENV = "ACCELERATE_DEEPSPEED_CONFIG_FILE"
"""Where `accelerate launch` tells each rank its DeepSpeed config file."""


def drop_offload(fault: Fault | None, spec: Any, environ: Any = os.environ) -> Any:
    """drop_offload: the spec (and accelerate's environment) pointing at a copy of the DeepSpeed config without its
    offload blocks, written into the cell's folder. Any other fault: the spec unchanged."""
    if fault is None or fault.kind != "drop_offload":
        return spec
    import json

    source = spec.deepspeed_config or environ.get(ACCELERATE_DEEPSPEED_FILE_ENV)
    if not source:
        raise RuntimeError("drop_offload: this cell has no DeepSpeed config")
    config = json.loads(Path(source).read_text(encoding="utf-8"))
    for block in ("offload_optimizer", "offload_param"):
        config["zero_optimization"].pop(block, None)
    copy = Path(spec.out_dir) / "deepspeed-without-offload.json"
    copy.write_text(json.dumps(config), encoding="utf-8")
    if spec.deepspeed_config:
        return spec.model_copy(update={"deepspeed_config": str(copy)})
    environ[ACCELERATE_DEEPSPEED_FILE_ENV] = str(copy)
    return spec


class FaultCallback(TrainerCallback):
    def __init__(self, fault: Fault, rank: int) -> None:
        self.fault, self.rank, self.steps = fault, rank, 0
        self.delay = delay_s() if fault.kind == "slow_step" else 0.0

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.steps += 1
        if self.fault.kind == "slow_step":
            spin(self.delay)
            return
        if self.rank != self.fault.rank or self.steps != self.fault.step:
            return
        if self.fault.kind == "nan_loss":
            poison_parameter(kwargs["model"])
        elif self.fault.kind not in ("bad_result", "drop_offload") and self.fault.kind not in BEFORE_TRAINING:
            fire(self.fault.kind)


def corrupt_report(fault: Fault | None, rank: int, path: Path) -> None:
    if fault and fault.kind == "bad_result" and rank == fault.rank:
        path.write_text('{"rank": 0, "step_ends": [1.0, 2.')
