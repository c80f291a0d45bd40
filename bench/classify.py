"""Failure classification from real evidence: exit status, the rank's exception text, the log tail.

Pure functions: the same text always gives the same class, so tests feed them real messages.
"""

import re
import signal
from dataclasses import dataclass

from bench.results_schema import ErrorClass, Status


@dataclass(frozen=True)
class Verdict:
    status: Status
    error_class: ErrorClass | None = None
    message: str = ""
    known_issue: str | None = None


@dataclass(frozen=True)
class Pattern:
    regex: re.Pattern[str]
    status: Status
    error_class: ErrorClass | None
    known_issue: str | None = None


def _p(regex: str, status: Status, error_class: ErrorClass | None = None, link: str | None = None) -> Pattern:
    return Pattern(re.compile(regex, re.IGNORECASE), status, error_class, link)


# First match wins: the most specific evidence comes first.
PATTERNS: tuple[Pattern, ...] = (
    _p(
        r"CUDA out of memory|OutOfMemoryError|out of memory|\bMemoryError\b|Cannot allocate memory|HIP out of memory",
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
_ERROR_LINE = re.compile(r"^\s*([A-Za-z_][\w.]*(Error|Exception|Interrupt)|RuntimeError|AssertionError)\b.*$")


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


def classify(
    *,
    exit_code: int | None,
    timed_out: bool,
    error_texts: list[str],
    log_tail: str,
    oom_killed: bool = False,
) -> Verdict:
    """Status of a cell that did not produce a clean ok, from what it left behind."""
    if timed_out:
        return Verdict(Status.TIMEOUT, None, "cell exceeded its time limit and was killed")
    if oom_killed:
        return Verdict(Status.OOM, None, "killed by the memory limit (OOMKilled)")
    evidence = "\n".join(error_texts) or log_tail
    for pattern in PATTERNS:
        if pattern.regex.search(evidence):
            message = first_error_line(error_texts[0] if error_texts else log_tail)
            return Verdict(pattern.status, pattern.error_class, message, pattern.known_issue)
    sig = signal_of(exit_code)
    if sig is not None:
        return Verdict(Status.ERROR, ErrorClass.CRASH, f"a rank was killed by {signal_name(sig)} (exit {exit_code})")
    message = first_error_line(evidence) or f"exit code {exit_code}"
    return Verdict(Status.ERROR, ErrorClass.OTHER, message)
