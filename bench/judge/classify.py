"""Failure classification from real evidence: exit status, the rank's exception text, the log tail.

Pure functions: the same text always gives the same class, so tests feed them real messages. The known-issue
entries are data (scenarios/known_issues.yaml), read once; tests may pass their own.
"""

import re
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from bench.launchers import LAUNCHERS
from bench.matrix.cell import Cell
from bench.matrix.known_issues import KnownIssue, find_known_issue, known_issues
from bench.results.schema import ErrorClass, Status


@dataclass(frozen=True)
class Classification:
    """What classify() makes of a cell that did not end cleanly: its status, error class and the message that
    shows why (the failure's class, not the regression verdict of bench/report/verdict.py)."""

    status: Status
    error_class: ErrorClass | None = None
    message: str = ""
    known_issue: str | None = None
    """Upstream link of the first known issue (scenarios/known_issues.yaml) this failure matches."""
    known_issue_note: str | None = None
    """That entry's one-line explanation."""


@dataclass(frozen=True)
class Pattern:
    regex: re.Pattern[str]
    status: Status
    error_class: ErrorClass | None


def _p(regex: str, status: Status, error_class: ErrorClass | None = None) -> Pattern:
    return Pattern(re.compile(regex, re.IGNORECASE), status, error_class)


# First match wins: the most specific evidence comes first.
PATTERNS: tuple[Pattern, ...] = (
    _p(r"RecipeVersionError", Status.ERROR, ErrorClass.VERSION),
    # cuBLAS/cuSOLVER/cuSPARSE/cuDNN report a failed device allocation as <LIB>_STATUS_ALLOC_FAILED (cuFFT:
    # CUFFT_ALLOC_FAILED), typically when the caching allocator has taken the memory a handle needs
    _p(
        r"CUDA out of memory|OutOfMemoryError|out of memory|\bMemoryError\b|Cannot allocate memory|HIP out of memory"
        r"|\b[A-Z]+(?:_STATUS)?_ALLOC_FAILED\b",
        Status.OOM,
    ),
    _p(r"Expected all tensors to be on the same device", Status.ERROR, ErrorClass.DEVICE_MISMATCH),
    _p(
        r"No module named|ModuleNotFoundError|ImportError|cannot import name|command not found"
        r"|No such file or directory: .(mpirun|deepspeed|torchrun|accelerate)."
        r"|launcher not found|is not installed|requires the",
        Status.ERROR,
        ErrorClass.IMPORT,
    ),
    _p(
        r"ProcessGroup|c10d|NCCL error|Gloo|gloo|Connection (reset|refused)|DistNetworkError|Broken pipe"
        r"|collective operation timeout|socket timeout",
        Status.ERROR,
        ErrorClass.COMM,
    ),
    _p(
        r"NotImplementedError|not supported|is not compatible|incompatible|cannot be used with|does not support"
        r"|can't train|only supported|no available devices|not implemented for",
        Status.ERROR,
        ErrorClass.INCOMPATIBLE,
    ),
    _p(r"ValueError|TypeError|KeyError|AssertionError|config", Status.ERROR, ErrorClass.CONFIG),
    _p(
        r"Segmentation fault|core dumped|Fatal Python error|Aborted|SIGSEGV|SIGABRT|SIGBUS",
        Status.ERROR,
        ErrorClass.CRASH,
    ),
)

_ROOT_CAUSE = re.compile(r"Root Cause.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", re.DOTALL)
_FATAL_LINE = re.compile(r"terminate called[^\n]*|Fatal Python error:[^\n]*|Segmentation fault[^\n]*")
# torch prefixes every stderr line of a rank in a process group with "[rank<N>]: "
_ERROR_LINE = re.compile(
    r"^\s*(?:\[rank\d+\]:\s*)?([A-Za-z_][\w.]*(Error|Exception|Interrupt)|RuntimeError|AssertionError)\b.*$"
)


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def signal_of(exit_code: int | None) -> int | None:
    """The signal that ended a process: negative return codes (Popen) and 128+N (shells, launchers)."""
    if exit_code is None:
        return None
    if exit_code < 0:
        return -exit_code
    if 128 < exit_code < 128 + 65:
        return exit_code - 128
    return None


def first_error_line(text: str) -> str:
    """The root cause a launcher reports, else the last exception line of a traceback (the real message),
    else the last non-empty line."""
    root = _ROOT_CAUSE.search(text)
    if root:
        rank, code = int(root.group(1)), int(root.group(2))
        sig = signal_of(code)
        fatal = _FATAL_LINE.search(text)
        return (
            f"rank {rank} exited with code {code}"
            + (f" ({signal_name(sig)})" if sig else "")
            + (f": {fatal.group(0).strip()}" if fatal else "")
        )
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if _ERROR_LINE.match(line):
            return line[:500]
    return lines[-1][:500] if lines else ""


# Most causal first: a peer's broken connection is the consequence of the rank that died or failed.
CAUSAL_ORDER: tuple[ErrorClass, ...] = (
    # what the cluster did to the job causes whatever its ranks report after it
    ErrorClass.NODE_FAIL,
    ErrorClass.PREEMPTED,
    ErrorClass.CANCELLED,
    ErrorClass.VERSION,
    ErrorClass.CRASH,
    ErrorClass.DEVICE_MISMATCH,
    ErrorClass.IMPORT,
    ErrorClass.INCOMPATIBLE,
    ErrorClass.CONFIG,
    ErrorClass.COMM,
    ErrorClass.OTHER,
)
# Launchers that share a report format (torchrun and accelerate: torchelastic's) share one regex: scan it once.
_RANK_EXIT_REPORTS: tuple[re.Pattern[str], ...] = tuple(
    dict.fromkeys(spec.rank_exit for spec in LAUNCHERS.values() if spec.rank_exit is not None)
)


def _causal_rank(verdict: Classification) -> int:
    if verdict.status == Status.OOM:
        return -1
    return CAUSAL_ORDER.index(verdict.error_class or ErrorClass.OTHER)


def _verdict_of(text: str) -> Classification:
    """The exception line decides when a pattern matches it; only then the whole text (traceback, log). A traceback
    names every file it passed through: a TypeError raised under torch.distributed's distributed_c10d.py is a
    configuration error, not a communication one."""
    line = first_error_line(text)
    for evidence in (line, text):
        for pattern in PATTERNS:
            if pattern.regex.search(evidence):
                return Classification(pattern.status, pattern.error_class, line)
    return Classification(Status.ERROR, ErrorClass.OTHER, line)


def killed_rank(log: str) -> Classification | None:
    """A rank the launcher saw die by a signal other than the SIGTERM it sends survivors."""
    for regex in _RANK_EXIT_REPORTS:
        for match in regex.finditer(log):
            sig = int(match["signal"]) if "signal" in match.groupdict() else signal_of(int(match["code"]))
            if sig and sig != signal.SIGTERM:
                fatal = _FATAL_LINE.search(log)
                message = f"rank {match['rank']} was killed by {signal_name(sig)}"
                return Classification(
                    Status.ERROR, ErrorClass.CRASH, message + (f": {fatal.group(0).strip()}" if fatal else "")
                )
    return None


def classify(
    *,
    exit_code: int | None,
    timed_out: bool,
    error_texts: list[str],
    log_tail: str,
    oom_killed: bool = False,
    oom_detail: str | None = None,
    stalled: str | None = None,
    cell: Cell | None = None,
    versions: Mapping[str, str | None] | None = None,
    known: Sequence[KnownIssue] | None = None,
    timeout_s: float | None = None,
) -> Classification:
    """Status of a cell that did not produce a clean ok, from what it left behind: every rank's error and the
    launcher's account of dead ranks are candidates, and the most causal one wins. With the cell and the installed
    package versions (env.json's `packages`), the first known issue that explains the failure is attached; `known`
    replaces the shipped entries. `oom_detail` names the rank a kernel memory limit killed, and the limit;
    `timeout_s` is the time limit the cell ran under; `stalled` the progress watchdog's reason for killing it."""
    verdict = _status_of(exit_code, timed_out, error_texts, log_tail, oom_killed, oom_detail, timeout_s, stalled)
    issue = find_known_issue(
        "\n".join([*error_texts, log_tail]),
        cell,
        versions or {},
        known_issues() if known is None else known,
    )
    if issue is None:
        return verdict
    return replace(verdict, known_issue=issue.link, known_issue_note=issue.note)


def _status_of(
    exit_code: int | None,
    timed_out: bool,
    error_texts: list[str],
    log_tail: str,
    oom_killed: bool,
    oom_detail: str | None = None,
    timeout_s: float | None = None,
    stalled: str | None = None,
) -> Classification:
    if oom_killed:  # before the timeout: a peer of a killed rank may hang until the time limit
        return Classification(Status.OOM, None, oom_detail or "killed by the memory limit (OOMKilled)")
    if stalled and not error_texts:  # the watchdog killed it; a rank's own error is the cause where one exists
        return Classification(Status.HANG, None, stalled)
    if timed_out:
        limit = "" if timeout_s is None else f" of {timeout_s:g} s"
        return Classification(Status.TIMEOUT, None, f"cell exceeded its time limit{limit} and was killed")
    candidates = [_verdict_of(text) for text in error_texts]
    dead = killed_rank(log_tail)
    if dead:
        candidates.append(dead)
    if not candidates and log_tail.strip():
        candidates.append(_verdict_of(log_tail))
    sig = signal_of(exit_code)
    if sig is not None:
        candidates.append(
            Classification(
                Status.ERROR, ErrorClass.CRASH, f"a rank was killed by {signal_name(sig)} (exit {exit_code})"
            )
        )
    informative = [c for c in candidates if c.message] or [
        Classification(Status.ERROR, ErrorClass.OTHER, f"exit code {exit_code}")
    ]
    return min(informative, key=_causal_rank)
