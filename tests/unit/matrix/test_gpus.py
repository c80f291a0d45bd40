"""The GPU catalog: every required GPU, every number sourced, the shipped profiles thin entries over it."""

import pytest

from bench.cli import main
from bench.errors import BenchError
from bench.matrix.gpus import NUMBERS, Catalog, gpu, load_catalog, parse_gpu_argument
from bench.matrix.profiles import gpu_profile, load_profile

REQUIRED = [
    "T4",
    "L4",
    "A10",
    "A10G",
    "RTX-3090",
    "RTX-4090",
    "RTX-5090",
    "L40S",
    "A100-40G",
    "A100-80G",
    "H100-PCIe",
    "H100-SXM",
    "H200",
    "B200",
    "MI300X",
    "Gaudi2",
    "Gaudi3",
]

PROFILES_BEFORE = {
    "1x4090": (24, "NVIDIA GeForce RTX 4090", 165),
    "2x4090": (24, "NVIDIA GeForce RTX 4090", 165),
    "1xA10": (24, "NVIDIA A10", 125),
    "2xA10": (24, "NVIDIA A10", 125),
    "1xH100": (80, "NVIDIA H100 SXM 80GB", 989),
    "1xL4": (24, "NVIDIA L4", 121),
    "1xT4": (16, "NVIDIA T4", 65),
    "8xA100-80G": (80, "NVIDIA A100-SXM4-80GB", 312),
    "2x8xA100-80G": (80, "NVIDIA A100-SXM4-80GB", 312),
    "8xGaudi2": (96, "Intel Gaudi2 HL-225", 432),
}
"""Memory, card and peak each profile stated itself before it named its catalog entry."""


def test_catalog_covers_the_required_gpus():
    names = {g.name for g in load_catalog().gpus}
    assert set(REQUIRED) <= names


def test_every_number_has_an_https_source():
    for entry in load_catalog().gpus:
        for figure in NUMBERS:
            assert entry.source(figure).startswith("https://"), (entry.name, figure)


@pytest.mark.parametrize(("name", "expected"), PROFILES_BEFORE.items())
def test_profiles_are_thin_entries_with_the_same_numbers(name, expected):
    profile = load_profile(name)
    assert profile.gpu is not None
    assert (profile.memory_per_device_gb, profile.card, profile.peak_tflops) == expected


def test_unknown_gpu_is_one_line_listing_the_known():
    with pytest.raises(BenchError, match=r"unknown GPU 'Quux'; known: T4, V100-16G, V100-32G, L4, A10") as info:
        gpu("Quux")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("text", "entry"),
    [
        ("H100", "H100-SXM"),
        ("A100-80GB", "A100-80G"),
        ("4090", "RTX-4090"),
        ("rtx 4090", "RTX-4090"),
        ("h100_sxm", "H100-SXM"),
        ("NVIDIA A10", "A10"),
        ("a100-40gb", "A100-40G"),
        ("A6000-Ada", "RTX-6000-Ada"),
        ("RTX 6000 Ada Generation", "RTX-6000-Ada"),
        ("V100", "V100-16G"),
    ],
)
def test_common_names_are_aliases(text, entry):
    assert gpu(text).name == entry


def test_unknown_gpu_suggests_the_closest_names():
    with pytest.raises(BenchError, match=r"unknown GPU 'A100-8'; did you mean A100-80G\? known: T4") as info:
        gpu("A100-8")
    assert "\n" not in str(info.value)


def test_an_alias_may_not_name_two_entries():
    twice = load_catalog().model_dump()
    twice["gpus"][0]["aliases"] = ["A10"]
    with pytest.raises(ValueError, match="'a10' is listed twice"):
        Catalog.model_validate(twice)


@pytest.mark.parametrize("text", ["A10:x", ":2", "A10:2:3"])
def test_malformed_gpu_argument(text):
    with pytest.raises(BenchError, match="expected NAME:COUNT"):
        parse_gpu_argument(text)


def test_a_zero_count_says_the_count_must_be_at_least_one():
    with pytest.raises(BenchError, match=r"^--gpu 'A100:0': COUNT must be 1 or more \(GPUs per node\), e.g. A100:1$"):
        parse_gpu_argument("A100:0")


def test_gpu_profile_counts_devices_and_nodes():
    profile = gpu_profile("h100-sxm:8", 2, "mistral-7b")
    assert (profile.device_count, profile.processes, profile.nodes) == (8, 16, 2)
    assert profile.name == "gpu-H100-SXMx8-2nodes"
    assert profile.memory_per_device_gb == 80
    t4 = gpu_profile("T4", 1, "mistral-7b")
    assert (t4.precision, t4.peak_tflops) == ("fp16", 65)


def test_profile_may_not_restate_a_catalog_figure(scenario_copy):
    path = scenario_copy / "hardware" / "1xA10.yaml"
    path.write_text(path.read_text() + "peak_tflops: 100\n")
    with pytest.raises(BenchError, match=r"1xA10.yaml: key 'peak_tflops': comes from the GPU catalog \(A10\)"):
        load_profile("1xA10", scenario_copy)


def test_cli_unknown_gpu_exits_with_one_line(capsys):
    assert main(["predict", "--gpu", "Quux:2", "--model", "qwen2.5-7b"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: unknown GPU 'Quux'; known:") and "\n" not in err


# Names the drivers give these devices (nvidia-smi --query-gpu=name, torch.cuda.get_device_name, rocm-smi, hl-smi),
# as printed on real machines; the H100 SXM and H200 rows were read on this project's lent GPU machines.
DRIVER_NAMES = {
    "T4": ["Tesla T4"],
    "V100-16G": ["Tesla V100-SXM2-16GB", "Tesla V100-PCIE-16GB"],
    "V100-32G": ["Tesla V100-SXM2-32GB", "Tesla V100-PCIE-32GB", "Tesla V100S-PCIE-32GB"],
    "L4": ["NVIDIA L4"],
    "A10": ["NVIDIA A10"],
    "A10G": ["NVIDIA A10G"],
    "RTX-3090": ["NVIDIA GeForce RTX 3090"],
    "RTX-4090": ["NVIDIA GeForce RTX 4090"],
    "RTX-5090": ["NVIDIA GeForce RTX 5090"],
    "RTX-A6000": ["NVIDIA RTX A6000"],
    "RTX-6000-Ada": ["NVIDIA RTX 6000 Ada Generation"],
    "L40S": ["NVIDIA L40S"],
    "A100-40G": ["NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"],
    "A100-80G": ["NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe"],
    "A800": ["NVIDIA A800-SXM4-80GB", "NVIDIA A800 80GB PCIe"],
    "H100-PCIe": ["NVIDIA H100 PCIe"],
    "H100-SXM": ["NVIDIA H100 80GB HBM3"],
    "H800": ["NVIDIA H800"],
    "H20": ["NVIDIA H20"],
    "H200": ["NVIDIA H200"],
    "B200": ["NVIDIA B200"],
    "MI300X": ["AMD Instinct MI300X"],
    "Gaudi2": ["GAUDI2"],
    "Gaudi3": ["GAUDI3"],
}


def test_every_catalog_entry_is_identified_by_its_driver_name() -> None:
    from bench.matrix.gpus import identify, load_catalog

    assert sorted(DRIVER_NAMES) == sorted(g.name for g in load_catalog().gpus)
    for name, driver_names in DRIVER_NAMES.items():
        for driver_name in driver_names:
            found = identify(driver_name)
            assert found is not None and found.name == name, (driver_name, found)


def test_cards_outside_the_catalog_are_not_taken_for_a_neighbour() -> None:
    from bench.matrix.gpus import identify

    for other in ("NVIDIA H100 NVL", "NVIDIA H200 NVL", "NVIDIA A100-SXM4-40GB MIG 1g.5gb", "NVIDIA A40", "cpu"):
        assert identify(other) is None, other


def test_every_host_memory_figure_has_its_own_https_source():
    entries = [g for g in load_catalog().gpus if g.host_node is not None]
    assert {g.name for g in entries} >= {"T4", "A10", "A10G", "A100-80G", "H100-SXM", "H200", "B200", "MI300X"}
    for entry in entries:
        assert entry.sources["host_node"].startswith("https://"), entry.name
        assert entry.sources["host_node"] != entry.sources.get("default"), entry.name  # the server's own page
        assert entry.host_node.memory_gb > 0 and entry.host_node.gpus >= 1, entry.name


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"host_node": {"system": "Some server", "gpus": 8, "memory_gb": 1024}}, "host_node has no source"),
        ({"sources": {"default": "https://example.com/a", "host_node": "https://example.com/b"}}, "does not have"),
        (
            {
                "host_node": {"system": "Some server", "gpus": 8, "memory_gb": 1024},
                "sources": {"default": "https://example.com/a", "host_node": "http://example.com/b"},
            },
            "is not an https:// link",
        ),
    ],
)
def test_a_host_memory_figure_needs_a_source(change, message):
    catalog = load_catalog().model_dump()
    entry = next(g for g in catalog["gpus"] if g["name"] == "L4")
    entry.update(change)
    with pytest.raises(ValueError, match=message):
        Catalog.model_validate(catalog)
