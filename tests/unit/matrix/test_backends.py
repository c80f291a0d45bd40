"""The per-backend and per-launcher descriptions are consistent with each other and with the axes."""

from bench.launchers import LAUNCHERS
from bench.matrix.axes import Backend, Launcher
from bench.matrix.backends import BACKENDS, Placement


def test_every_axis_value_is_described_once():
    assert set(BACKENDS) == set(Backend) and set(LAUNCHERS) == set(Launcher)
    assert all(name == spec.name for name, spec in BACKENDS.items())


def test_multi_process_backends_are_launched_by_multi_process_launchers():
    for spec in BACKENDS.values():
        assert spec.launchers, spec.name
        assert all(LAUNCHERS[launcher].multi_process == spec.multi_process for launcher in spec.launchers), spec.name


def test_accelerate_launches_only_backends_with_an_accelerate_type():
    for spec in BACKENDS.values():
        assert (Launcher.ACCELERATE in spec.launchers) <= (spec.accelerate_type is not None), spec.name


def test_zero_stage_and_engagement_agree():
    for spec in BACKENDS.values():
        assert spec.engagement.zero_stage == spec.zero_stage, spec.name
        if spec.deepspeed:
            assert spec.accelerate_type == "DEEPSPEED" and spec.engagement.wrapper == "DeepSpeedEngine"
            offload = spec.deepspeed.offload_optimizer
            assert spec.engagement.optimizer_offload == offload
            assert (spec.sharding.optimizer == Placement.OFFLOADED) == (offload is not None)


def test_what_zero2_shards_and_what_it_replicates():
    zero2 = BACKENDS[Backend.ZERO2]
    assert (zero2.sharding.params, zero2.sharding.grads, zero2.sharding.optimizer) == (
        Placement.REPLICATED,
        Placement.SHARDED,
        Placement.SHARDED,
    )
    assert zero2.sharding.reference == Placement.REPLICATED  # TRL's prepare_deepspeed: stage 0 under ZeRO-1/2
    assert BACKENDS[Backend.ZERO3].sharding.reference == Placement.SHARDED


def test_devices_per_cell():
    assert BACKENDS[Backend.DDP].devices_per_cell(processes=2, device_count=2) == 2
    assert BACKENDS[Backend.DEVICE_MAP].devices_per_cell(processes=1, device_count=4) == 4


def test_offload_is_described_once_and_engagement_checks_it():
    for spec in BACKENDS.values():
        params_offloaded = spec.sharding.params == Placement.OFFLOADED
        assert (spec.engagement.param_offload == "cpu") == params_offloaded, spec.name
        assert (spec.engagement.state_on == "cpu") == spec.offloads, spec.name
        if spec.deepspeed:
            assert (spec.deepspeed.offload_param is not None) == params_offloaded, spec.name
        if spec.fsdp_version:
            assert spec.fsdp_cpu_offload == spec.offloads == params_offloaded, spec.name


def test_world_size_one_only_where_it_means_something():
    for spec in BACKENDS.values():
        if not spec.multi_process:
            assert spec.min_processes == 1, spec.name
        elif spec.offloads:
            assert spec.min_processes == 1 and not spec.alone, spec.name  # one device + host memory
        else:
            assert spec.min_processes == 2 and spec.alone, spec.name


def test_a_backend_below_its_minimum_needs_a_reason():
    import dataclasses

    import pytest

    with pytest.raises(ValueError, match="needs a multi-process backend and the reason"):
        dataclasses.replace(BACKENDS[Backend.DDP], alone="")
