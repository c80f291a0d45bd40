"""The host microbenchmark env.json records, and env.json files written before it."""

from bench.results.env_schema import EnvFingerprint
from bench.results.microbench import cpu_matmul_gflops, cpu_memory_gbps


def test_old_env_json_without_the_measurement_loads():
    env = EnvFingerprint.model_validate_json('{"hardware": {"cpu_model": "AMD EPYC", "cpu_count": 2}}')
    assert env.hardware.cpu_matmul_gflops is None and env.hardware.cpu_memory_gbps is None


def test_measurements_are_positive_and_restore_the_thread_count():
    import torch

    threads = torch.get_num_threads()
    assert cpu_matmul_gflops(repeats=1) > 0.1
    assert cpu_memory_gbps(repeats=1) > 0.1
    assert torch.get_num_threads() == threads
