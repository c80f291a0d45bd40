"""What one rank of a worker reports back: raw series, memory peaks, engagement, or its error."""

from pathlib import Path

from pydantic import BaseModel

from bench.files import write_whole
from bench.results.schema import Engagement, RssMoment, RssParts


class RankReport(BaseModel):
    rank: int
    pid: int
    hostname: str
    forked: bool = False
    """Forked from the run's fork server (bench/isolation/fork_server_process.py) instead of started as an interpreter
    of its
    own."""
    fresh_reason: str | None = None
    """Why it started as an interpreter of its own although a fork server ran
    (bench/isolation/fork_server_client.py)."""
    load_s: float | None = None
    train_start: float | None = None
    step_ends: list[float] = []
    cpu_times: list[float] = []
    """Process CPU seconds (user + system, all threads) at each step end; empty in older reports."""
    tokens: list[int] = []
    memory_now: list[int] = []
    memory_kind: str = "rss"
    load_peak_bytes: int | None = None
    train_peak_bytes: int | None = None
    cuda_reserved_peak_bytes: int | None = None
    host_peak_rss_bytes: int | None = None
    nvml_peak_bytes: int | None = None
    baseline_rss_bytes: int | None = None
    """RSS after the cell's libraries are imported, before the model loads."""
    baseline_cgroup_bytes: int | None = None
    """The rank's memory cgroup usage at the same moment (None without a memory budget)."""
    rss_parts: dict[RssMoment, RssParts] = {}
    """RSS by what backs it, read with the baseline, the load peak and the training peak (bench/results/schema.py
    RankMemoryFigures.rss_parts); empty in older reports."""
    losses: list[float | None] = []
    """This rank's training loss per step (None: not finite)."""
    batch_widths: list[int] = []
    """This rank's padded row length of each training batch: the longest row it saw, which its activation peak
    follows (ranks read different batches); empty in older reports."""
    reward_accuracies: list[float | None] = []
    """The trainer's rank-gathered reward accuracy per step (bench/worker/measure.py ACCURACY_METRICS)."""
    sampled_rewards: list[float | None] = []
    """Online methods: the rank-gathered mean total reward of each generation (bench/worker/rewards.py)."""
    reward_parts: dict[str, list[float | None]] = {}
    """Online methods: each reward function's rank-gathered mean per generation, by the name TRL logs it under."""
    pair_accuracy: float | None = None
    """Reward models: the pairwise accuracy of the trained model on `pairs_evaluated` training pairs, measured
    after training (bench/worker/trainers/reward.py)."""
    pairs_evaluated: int | None = None
    engagement: Engagement | None = None
    phases: dict[str, float] = {}
    """Epoch seconds at each moment the rank passed (bench/worker/phases.py EVENTS); empty in older reports."""
    error: str | None = None
    traceback_tail: str | None = None

    def write(self, path: Path) -> None:
        write_whole(path, self.model_dump_json())


def read_rank_reports(folder: Path) -> tuple[list[RankReport], list[str]]:
    """Every readable rank report in `folder`, and a problem line for each unreadable one."""
    reports, problems = [], []
    for path in sorted(folder.glob("rank*.json")):
        try:
            reports.append(RankReport.model_validate_json(path.read_text()))
        except (OSError, ValueError) as exc:
            problems.append(f"{path.name}: malformed rank report ({str(exc).splitlines()[0]})")
    return reports, problems
