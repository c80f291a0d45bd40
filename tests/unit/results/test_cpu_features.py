"""What env.json records of the CPU (bench/results/cpu_features.py): flags, oneDNN's path for bf16 matmuls,
bitsandbytes' backend and kernels; read back from a run, or from a measurement after it."""

import json
import sys

import pytest

from bench.errors import BenchError
from bench.results import cpu_features, probe_cache
from bench.results.cpu_features import (
    FLAGS,
    PROBE_PREFIX,
    CpuFeatures,
    MeasuredAfter,
    cpu_flags,
    detect_cpu_features,
    library_env,
    parse_probe,
)
from bench.results.cpu_probe import routes_bf16_to_onednn
from bench.results.env import run_cpu_features
from bench.results.env_schema import EnvFingerprint
from bench.results.layout import CPU_FEATURES_AFTER_FILE, ENV_FILE

XEON_AMX = (
    "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\n"
    "flags\t\t: fpu sse2 avx2 fma avx512f avx512dq avx512bw avx512vl avx_vnni avx512_bf16 avx512_vnni amx_bf16 "
    "amx_tile amx_int8\nprocessor\t: 1\nflags\t\t: fpu\n"
)
EPYC_ZEN3 = "model name\t: AMD EPYC 7B13\nflags\t\t: fpu sse2 avx avx2 fma sha_ni vaes\n"

AMX_STDOUT = "\n".join(
    [
        "onednn_verbose,v1,info,oneDNN v3.12.0 (commit 80afa71049cd69a3df32adcccb623b12cd7baa22)",
        "onednn_verbose,v1,info,cpu,runtime:OpenMP,nthr:1",
        "onednn_verbose,v1,info,cpu,isa:Intel AVX10.1 and Intel AMX with bfloat16 and 8-bit integer support",
        "onednn_verbose,v1,primitive,create:cache_miss,cpu,matmul,brg_matmul:avx10_1_512_amx,undef,"
        "src:bf16::blocked:ab::f0 wei:bf16::blocked:ab::f0 dst:bf16::blocked:ab::f0,attr-scratchpad:user,,997x64:64x8,0.19",
        "onednn_verbose,v1,primitive,exec,cpu,matmul,brg_matmul:avx10_1_512_amx,undef,,,,997x64:64x8,0.02",
        PROBE_PREFIX
        + json.dumps(
            {
                "torch_cpu_capability": "AVX512",
                "torch_onednn_bf16": True,
                "onednn": {"bf16_primitive_bytes": 690000.0},
                "ipex": None,
                "bitsandbytes": {"version": "0.50.2", "backend": "CPU", "training_ops": {"int8": ["aten.mm[float32]"]}},
            }
        ),
    ]
)


def test_flags_are_the_ones_the_libraries_test_for_in_a_fixed_order():
    assert cpu_flags(XEON_AMX) == [
        "avx2",
        "fma",
        "avx512f",
        "avx512dq",
        "avx512bw",
        "avx512vl",
        "avx512_vnni",
        "avx_vnni",
        "avx512_bf16",
        "amx_tile",
        "amx_bf16",
        "amx_int8",
    ]
    assert cpu_flags(EPYC_ZEN3) == ["avx2", "fma"]
    assert cpu_flags("") == []
    assert set(cpu_flags(XEON_AMX)) <= set(FLAGS)


def test_library_environment_keeps_the_variables_that_change_kernels():
    environ = {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE", "DNNL_VERBOSE": "0", "HOME": "/root", "ATEN_CPU_CAPABILITY": "avx2"}
    assert library_env(environ) == {"ATEN_CPU_CAPABILITY": "avx2", "DNNL_VERBOSE": "0", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}


def test_the_probe_output_is_read_with_onednn_verbose_lines():
    features = parse_probe(AMX_STDOUT)
    assert features is not None
    assert features.onednn.version == "v3.12.0"
    assert features.onednn.isa == "Intel AVX10.1 and Intel AMX with bfloat16 and 8-bit integer support"
    assert features.onednn.bf16_matmul == "brg_matmul:avx10_1_512_amx"
    assert features.onednn.bf16_primitive_bytes == 690000.0
    assert features.bitsandbytes.training_ops == {"int8": ["aten.mm[float32]"]}
    # an ISA line with commas in it, and a CPU whose bf16 matmuls oneDNN runs without native bf16
    avx512 = parse_probe(
        "onednn_verbose,v1,info,cpu,isa:Intel AVX-512 with AVX512BW, AVX512VL, and AVX512DQ extensions\n"
        "onednn_verbose,v1,primitive,create:cache_miss,cpu,matmul,gemm:jit:bf16,undef,,,,997x64:64x8,1.0\n"
        + PROBE_PREFIX
        + "{}"
    )
    assert avx512.onednn.isa == "Intel AVX-512 with AVX512BW, AVX512VL, and AVX512DQ extensions"
    assert avx512.onednn.bf16_matmul == "gemm:jit:bf16"
    assert parse_probe("onednn_verbose,v1,info,cpu,isa:x\n") is None


def test_torch_sends_bf16_matmuls_to_onednn_only_with_avx512_bw_vl_dq():
    assert routes_bf16_to_onednn({"avx512_bw": True, "avx512_vl": True, "avx512_dq": True, "avx2": True})
    assert not routes_bf16_to_onednn({"avx512_bw": True, "avx512_vl": True, "avx512_dq": False})
    assert not routes_bf16_to_onednn({"avx2": True})


def test_this_machine_is_probed():
    features = detect_cpu_features()
    assert features.probe_error is None
    assert features.flags == cpu_flags(open("/proc/cpuinfo").read())
    assert features.torch_cpu_capability in ("DEFAULT", "AVX2", "AVX512", "ZVECTOR", "VSX", "SVE256")
    assert features.torch_onednn_bf16 == ({"avx512bw", "avx512vl", "avx512dq"} <= set(features.flags))
    if features.torch_onednn_bf16:
        assert features.onednn.bf16_matmul and features.onednn.isa and features.onednn.bf16_primitive_bytes > 0
    bnb = features.bitsandbytes
    assert bnb is not None and bnb.native_library.startswith("libbitsandbytes_") and not bnb.errors
    if bnb.backend != "CPU":
        return
    assert bnb.native_library == "libbitsandbytes_cpu.so" and "dequantize_4bit" in bnb.cpu_kernels
    # int8 trains by dequantising into an fp32 matmul (MatMul8bitFp), nf4 through gemm_4bit's dequantisation
    assert bnb.training_ops["int8"] == ["aten.mm[float32]"]
    assert "bitsandbytes.dequantize_4bit" in bnb.training_ops["nf4"] and "aten.mm[float32]" in bnb.training_ops["nf4"]


def test_a_probe_that_cannot_run_is_recorded_not_raised(tmp_path):
    features = detect_cpu_features(python=str(tmp_path / "no-python"))
    assert features.probe_error and features.torch_cpu_capability is None
    assert features.flags == cpu_flags(open("/proc/cpuinfo").read())


def test_old_env_json_loads_without_cpu_features_and_new_ones_round_trip():
    assert EnvFingerprint.model_validate_json('{"hardware": {"cpu_model": "AMD EPYC"}}').cpu_features is None
    env = EnvFingerprint(cpu_features=parse_probe(AMX_STDOUT))
    assert EnvFingerprint.model_validate_json(env.model_dump_json()) == env


def test_a_run_s_features_come_from_its_env_json_else_from_a_measurement_after_it(tmp_path):
    assert run_cpu_features(tmp_path) == (None, "not recorded")
    after = MeasuredAfter(
        measured_at="2026-11-26", machine="Intel(R) Xeon(R) Processor, 2 cores", cpu_features=CpuFeatures(flags=["avx2"])
    )
    (tmp_path / CPU_FEATURES_AFTER_FILE).write_text(after.model_dump_json())
    features, source = run_cpu_features(tmp_path)
    assert features.flags == ["avx2"] and source == f"{CPU_FEATURES_AFTER_FILE}: measured 2026-11-26 after the run"
    (tmp_path / ENV_FILE).write_text(EnvFingerprint(cpu_features=CpuFeatures(flags=["avx512f"])).model_dump_json())
    assert run_cpu_features(tmp_path) == (CpuFeatures(flags=["avx512f"]), ENV_FILE)
    (tmp_path / ENV_FILE).unlink()
    (tmp_path / CPU_FEATURES_AFTER_FILE).write_text('{"machine": "x"}')
    with pytest.raises(BenchError, match="not valid CPU features"):
        run_cpu_features(tmp_path)


def test_a_second_probe_on_this_machine_and_interpreter_reads_the_first(monkeypatch, tmp_path):
    monkeypatch.setattr(probe_cache, "PROBE_CACHE_DIR", tmp_path)
    started = []
    real_run = cpu_features.subprocess.run

    def run(*args, **kwargs):  # the real probe once, then its output again
        started.append(args)
        if len(started) == 1:
            started.append(real_run(*args, **kwargs))
        return started[1]

    monkeypatch.setattr(cpu_features.subprocess, "run", run)
    first = detect_cpu_features()
    second = detect_cpu_features()
    assert len(started) == 2 and first.probe_error is None and first.probed_at
    assert second == first
    for kept in tmp_path.glob("*.json"):  # a file that cannot be read: probed again
        kept.write_text("{", encoding="utf-8")
    assert detect_cpu_features() == first.model_copy(update={"probed_at": detect_cpu_features().probed_at})
    assert len(started) == 3
    text = open("/proc/cpuinfo").read()
    key = probe_cache.probe_key(sys.executable, text, {})
    assert key and probe_cache.probe_key(sys.executable, text, {"ONEDNN_MAX_CPU_ISA": "AVX2"}) != key
    assert probe_cache.probe_key("/usr/bin/python3-other", text, {}) is None
