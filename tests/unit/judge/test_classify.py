"""Classification fed with real failures: real processes, real launchers, real exception texts."""

import subprocess
import sys

from bench.judge.classify import classify, first_error_line
from bench.launchers import LAUNCHERS
from bench.matrix.axes import Backend, Init, Launcher, Quant
from bench.matrix.cell import Cell
from bench.matrix.known_issues import known_issues
from bench.results.schema import ErrorClass, Status

# Verbatim messages from torch and transformers; these need hardware this suite's CI lacks.
CUDA_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "22.05 GiB of which 1.12 GiB is free. Including non-PyTorch memory, this process has 20.92 GiB memory in use."
)
DEVICE_MISMATCH = (
    "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cuda:1! "
    "(when checking argument for argument mat2 in method wrapper_CUDA_mm)"
)
# Launchers' own reports of a rank killed by SIGKILL (torchelastic for torchrun and accelerate; Open MPI).
TORCHELASTIC_KILLED = (
    "Root Cause (first observed failure):\n[0]:\n  rank      : 1 (local_rank: 1)\n  exitcode  : -9 (pid: 7)\n"
)
MPIRUN_KILLED = "mpirun noticed that process rank 1 with PID 4242 on node vm exited on signal 9 (Killed)."


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
    verdict = classify(exit_code=1, timed_out=False, error_texts=[peer], log_tail=TORCHELASTIC_KILLED)
    assert (verdict.error_class, verdict.message) == (ErrorClass.CRASH, "rank 1 was killed by SIGKILL")
    alone = classify(exit_code=1, timed_out=False, error_texts=[peer], log_tail="")
    assert alone.error_class == ErrorClass.COMM


def test_mpirun_signal_report():
    verdict = classify(exit_code=137, timed_out=False, error_texts=[], log_tail=MPIRUN_KILLED)
    assert verdict.message == "rank 1 was killed by SIGKILL"


def test_every_launcher_that_reports_dead_ranks_is_read_from_its_description():
    reports = {Launcher.TORCHRUN: TORCHELASTIC_KILLED, Launcher.ACCELERATE: TORCHELASTIC_KILLED}
    reports[Launcher.MPIRUN] = MPIRUN_KILLED
    assert {name for name, spec in LAUNCHERS.items() if spec.rank_exit is not None} == set(reports)
    for launcher, log in reports.items():
        verdict = classify(exit_code=1, timed_out=False, error_texts=[], log_tail=log)
        assert verdict.message == "rank 1 was killed by SIGKILL", launcher


SPLIT_CELL = Cell(init=Init.ONE_ADAPTER, quant=Quant.NF4, backend=Backend.DEVICE_MAP, launcher=Launcher.PYTHON)
STACK = {"trl": "1.16.0", "transformers": "5.23.0", "deepspeed": "0.19.8", "accelerate": "1.15.0"}


def test_known_issue_is_attached_from_the_shipped_entries():
    verdict = classify(
        exit_code=1, timed_out=False, error_texts=[DEVICE_MISMATCH], log_tail="", cell=SPLIT_CELL, versions=STACK
    )
    entry = next(issue for issue in known_issues() if issue.id == "device-map-split")
    assert verdict.error_class == ErrorClass.DEVICE_MISMATCH
    assert (verdict.known_issue, verdict.known_issue_note) == (entry.link, entry.note)
    assert verdict.known_issue == "https://github.com/huggingface/trl/issues/958"


def test_no_known_issue_without_the_cell_or_with_no_entries():
    no_cell = classify(exit_code=1, timed_out=False, error_texts=[DEVICE_MISMATCH], log_tail="", versions=STACK)
    no_entries = classify(
        exit_code=1, timed_out=False, error_texts=[DEVICE_MISMATCH], log_tail="", cell=SPLIT_CELL, known=()
    )
    assert (no_cell.known_issue, no_cell.known_issue_note) == (None, None)
    assert (no_entries.known_issue, no_entries.known_issue_note) == (None, None)
    assert no_cell.error_class == no_entries.error_class == ErrorClass.DEVICE_MISMATCH


def test_known_issue_reads_the_launcher_log_too():
    # DeepSpeed's stage-3 warning reaches the log, the OOM the rank's report (trl#1377).
    warning = "2 pytorch allocator cache flushes since last step. this happens when there is high memory pressure"
    zero3 = Cell(init=Init.TWO_MODELS, quant=Quant.NONE, backend=Backend.ZERO3, launcher=Launcher.DEEPSPEED)
    with_log = classify(exit_code=1, timed_out=False, error_texts=[CUDA_OOM], log_tail=warning, cell=zero3)
    without = classify(exit_code=1, timed_out=False, error_texts=[CUDA_OOM], log_tail="", cell=zero3)
    assert with_log.status == without.status == Status.OOM
    assert with_log.known_issue == "https://github.com/huggingface/trl/issues/1377"
    assert without.known_issue is None


def test_every_error_class_has_a_causal_rank():
    from bench.judge.classify import CAUSAL_ORDER
    from bench.results.schema import ErrorClass

    assert set(CAUSAL_ORDER) == set(ErrorClass) and len(CAUSAL_ORDER) == len(ErrorClass)


def test_signal_of_exit_codes():
    from bench.judge.classify import signal_of

    cases = {None: None, 0: None, 1: None, -9: 9, -11: 11, 128: None, 129: 1, 137: 9, 192: 64, 193: None}
    assert {code: signal_of(code) for code in cases} == cases


def test_first_error_line_reads_a_launchers_root_cause():
    abort = "terminate called without an active exception\nRoot Cause (first observed failure):\n[0]:\n"
    abort += "  rank      : 1 (local_rank: 1)\n  exitcode  : -6 (pid: 5350)\n"
    assert (
        first_error_line(abort) == "rank 1 exited with code -6 (SIGABRT): terminate called without an active exception"
    )
    plain = "Root Cause (first observed failure):\n[0]:\n  rank      : 0 (local_rank: 0)\n  exitcode  : 1 (pid: 7)\n"
    assert first_error_line(plain) == "rank 0 exited with code 1"


def test_first_error_line_keeps_500_characters_of_the_last_line():
    assert first_error_line("noise\nValueError: " + "x" * 600) == ("ValueError: " + "x" * 600)[:500]
    assert first_error_line("first\nlast " + "y" * 600 + "\n\n") == ("last " + "y" * 600)[:500]
    assert first_error_line("only line") == "only line"


def test_what_no_pattern_explains_is_other_with_its_line():
    verdict = classify(exit_code=1, timed_out=False, error_texts=["the cat sat on the keyboard"], log_tail="")
    assert (verdict.status, verdict.error_class, verdict.message) == (
        Status.ERROR,
        ErrorClass.OTHER,
        "the cat sat on the keyboard",
    )


def test_a_timeout_says_so():
    verdict = classify(exit_code=-9, timed_out=True, error_texts=[], log_tail="")
    assert (verdict.status, verdict.error_class, verdict.message) == (
        Status.TIMEOUT,
        None,
        "cell exceeded its time limit and was killed",
    )


def test_a_timeout_names_its_limit_in_seconds():
    verdict = classify(exit_code=-9, timed_out=True, error_texts=[], log_tail="", timeout_s=45)
    assert (verdict.status, verdict.message) == (Status.TIMEOUT, "cell exceeded its time limit of 45 s and was killed")
    fraction = classify(exit_code=-9, timed_out=True, error_texts=[], log_tail="", timeout_s=7.5)
    assert fraction.message == "cell exceeded its time limit of 7.5 s and was killed"


def test_an_exit_by_signal_or_code_alone():
    killed = classify(exit_code=-11, timed_out=False, error_texts=[], log_tail="")
    assert (killed.status, killed.error_class, killed.message) == (
        Status.ERROR,
        ErrorClass.CRASH,
        "a rank was killed by SIGSEGV (exit -11)",
    )
    silent = classify(exit_code=3, timed_out=False, error_texts=[], log_tail="")
    assert (silent.status, silent.error_class, silent.message) == (Status.ERROR, ErrorClass.OTHER, "exit code 3")
    # a real message outranks the bare signal when it is more causal
    oom = classify(exit_code=-9, timed_out=False, error_texts=[CUDA_OOM], log_tail="")
    assert oom.status == Status.OOM


def test_a_rank_that_reported_its_error_is_judged_without_the_launchers_log():
    peer = "RuntimeError: Gloo connection reset by peer"
    verdict = classify(exit_code=1, timed_out=False, error_texts=[peer], log_tail="ValueError: unrelated noise")
    assert verdict.error_class == ErrorClass.COMM
    from_log = classify(exit_code=1, timed_out=False, error_texts=[], log_tail="ValueError: bad config")
    assert (from_log.error_class, from_log.message) == (ErrorClass.CONFIG, "ValueError: bad config")


def test_the_exception_line_decides_before_the_files_a_traceback_passed_through():
    """A real TypeError raised inside torch.distributed (distributed_c10d.py, c10d_logger.py): the traceback names
    c10d on every frame, the error is a wrong argument, not a lost connection. Both what the worker records (its
    exception and traceback) and the rank's stderr (each line prefixed `[rank0]: ` by torch) say so."""
    done = _run(
        "import socket, traceback, torch, torch.distributed as dist\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]; s.close()\n"
        "dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=0, world_size=1)\n"
        "try:\n"
        "    dist.all_reduce([torch.ones(1)])\n"
        "except Exception as exc:\n"  # what bench/worker/__main__.py stores in the rank's report
        "    print(f'{type(exc).__name__}: {exc}'.strip() + '\\n' + ''.join(traceback.format_exception(exc)))\n"
        "    raise\n"
    )
    assert "distributed_c10d.py" in done.stdout and "[rank0]: TypeError" in done.stderr
    for evidence in ({"error_texts": [done.stdout], "log_tail": ""}, {"error_texts": [], "log_tail": done.stderr}):
        verdict = classify(exit_code=done.returncode, timed_out=False, **evidence)
        assert (verdict.status, verdict.error_class) == (Status.ERROR, ErrorClass.CONFIG)
        assert "TypeError: Invalid function argument" in verdict.message
    # a communication failure's own line still says so
    nccl = "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited"
    assert classify(exit_code=1, timed_out=False, error_texts=[nccl], log_tail="").error_class == ErrorClass.COMM


def test_cuda_libraries_alloc_failures_are_oom():
    # verbatim forms of torch's CUDA library errors (cuBLAS handle creation, cuSOLVER, cuDNN, cuFFT)
    for message in (
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "RuntimeError: cusolver error: CUSOLVER_STATUS_ALLOC_FAILED, when calling `cusolverDnCreate(handle)`",
        "RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
        "RuntimeError: cuFFT error: CUFFT_ALLOC_FAILED",
    ):
        verdict = classify(exit_code=1, timed_out=False, error_texts=[message], log_tail="")
        assert verdict.status == Status.OOM, message
    other = classify(
        exit_code=1, timed_out=False, error_texts=["RuntimeError: CUBLAS_STATUS_EXECUTION_FAILED"], log_tail=""
    )
    assert other.status == Status.ERROR


STALL = "rank 1 made no progress for 12 s after step 5 (progress watchdog limit 8 s); rank 0 waits inside step 6"


def test_a_cell_the_progress_watchdog_stopped_is_a_hang_named_by_its_stalled_rank():
    verdict = classify(exit_code=-15, timed_out=False, error_texts=[], log_tail="", stalled=STALL)
    assert (verdict.status, verdict.error_class, verdict.message) == (Status.HANG, None, STALL)


def test_a_ranks_own_error_is_the_cause_of_a_stall_not_the_hang():
    verdict = classify(exit_code=-15, timed_out=False, error_texts=[CUDA_OOM], log_tail="", stalled=STALL)
    assert verdict.status == Status.OOM
