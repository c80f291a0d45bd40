"""Classification fed with real failures: real processes, real launchers, real exception texts."""

import subprocess
import sys

from bench.classify import classify, first_error_line
from bench.results_schema import ErrorClass, Status

# Verbatim messages from torch and transformers; these need hardware this suite's CI lacks.
CUDA_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "22.05 GiB of which 1.12 GiB is free. Including non-PyTorch memory, this process has 20.92 GiB memory in use."
)
DEVICE_MISMATCH = (
    "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cuda:1! "
    "(when checking argument for argument mat2 in method wrapper_CUDA_mm)"
)


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_missing_module_is_import():
    done = _run("import liger_kernel_not_installed")
    verdict = classify(exit_code=done.returncode, timed_out=False, error_texts=[done.stderr], log_tail="")
    assert (verdict.status, verdict.error_class) == (Status.ERROR, ErrorClass.IMPORT)
    assert verdict.message == "ModuleNotFoundError: No module named 'liger_kernel_not_installed'"


def test_real_allocation_failure_is_oom():
    done = subprocess.run(
        ["bash", "-c", f"ulimit -v 400000; {sys.executable} -c 'bytearray(2 * 10**9)'"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    verdict = classify(exit_code=done.returncode, timed_out=False, error_texts=[], log_tail=done.stderr)
    assert verdict.status == Status.OOM
    assert "MemoryError" in verdict.message


def test_rank_killed_by_signal_is_crash():
    done = _run("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    verdict = classify(exit_code=done.returncode, timed_out=False, error_texts=[], log_tail=done.stderr)
    assert (verdict.status, verdict.error_class) == (Status.ERROR, ErrorClass.CRASH)
    assert "SIGKILL" in verdict.message


def test_torchrun_root_cause_names_rank_and_signal(tmp_path):
    script = tmp_path / "abort.py"
    script.write_text("import os, time\nif os.environ['RANK'] == '1':\n    os.abort()\ntime.sleep(30)\n")
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    log = done.stdout + done.stderr
    verdict = classify(exit_code=done.returncode, timed_out=False, error_texts=[], log_tail=log)
    assert (verdict.status, verdict.error_class) == (Status.ERROR, ErrorClass.CRASH)
    assert verdict.message.startswith("rank 1 was killed by SIGABRT")


def test_cuda_oom_and_device_mismatch_messages():
    oom = classify(exit_code=1, timed_out=False, error_texts=[CUDA_OOM], log_tail="")
    assert oom.status == Status.OOM and oom.message.startswith("torch.OutOfMemoryError: CUDA out of memory")
    mismatch = classify(exit_code=1, timed_out=False, error_texts=[DEVICE_MISMATCH], log_tail="")
    assert mismatch.error_class == ErrorClass.DEVICE_MISMATCH


def test_real_not_implemented_is_incompatible():
    done = _run("import torch; torch.nn.Module()()")
    verdict = classify(exit_code=done.returncode, timed_out=False, error_texts=[done.stderr], log_tail="")
    assert verdict.error_class == ErrorClass.INCOMPATIBLE
    assert verdict.message.startswith("NotImplementedError: Module [Module] is missing")


def test_timeout_wins_over_everything():
    verdict = classify(exit_code=-9, timed_out=True, error_texts=[CUDA_OOM], log_tail="")
    assert verdict.status == Status.TIMEOUT


def test_first_error_line_takes_the_last_exception_of_a_traceback():
    text = 'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: bad value\n\nnoise\n'
    assert first_error_line(text) == "ValueError: bad value"
    assert first_error_line("") == ""


def test_a_dead_rank_outranks_its_peers_broken_connection():
    peer = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:538] Connection closed by peer [127.0.0.1]:1"
    log = "Root Cause (first observed failure):\n[0]:\n  rank      : 1 (local_rank: 1)\n  exitcode  : -9 (pid: 7)\n"
    verdict = classify(exit_code=1, timed_out=False, error_texts=[peer], log_tail=log)
    assert (verdict.error_class, verdict.message) == (ErrorClass.CRASH, "rank 1 was killed by SIGKILL")
    alone = classify(exit_code=1, timed_out=False, error_texts=[peer], log_tail="")
    assert alone.error_class == ErrorClass.COMM


def test_mpirun_signal_report():
    log = "mpirun noticed that process rank 1 with PID 4242 on node vm exited on signal 9 (Killed)."
    verdict = classify(exit_code=137, timed_out=False, error_texts=[], log_tail=log)
    assert verdict.message == "rank 1 was killed by SIGKILL"
