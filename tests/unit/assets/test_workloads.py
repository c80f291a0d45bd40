"""Every shipped hardware profile and workload loads; every shipped config.json is the published architecture;
big random checkpoints are written shard by shard and load through from_pretrained; synthetic data is long-tailed."""

import json
import statistics
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, OPTConfig

from bench.assets.prepare import meta_model, parameter_count, write_random_checkpoint
from bench.assets.synthetic_prefs import TOKENS_PER_WORD, generate
from bench.matrix.profiles import SyntheticPrefs, Workload, available, load_profile, load_workload
from bench.paths import SCENARIOS_DIR

# Published sizes (model cards / papers); tolerance 5%: Llama 2's "7B" is 6.74B, its "70B" 68.98B.
PUBLISHED_PARAMS = {
    "phi-2": 2.7e9,
    "opt-1.3b": 1.3e9,
    "llama-3.2-1b": 1.23e9,
    "llama-2-7b": 7.0e9,
    "mistral-7b": 7.3e9,
    "llama-2-70b": 70e9,
    "mixtral-8x7b": 46.7e9,
}
PEAK_TFLOPS = {"1xH100": 989, "2xA10": 125, "2x4090": 165, "1xL4": 121, "8xA100-80G": 312, "8xGaudi2": 432}
GPU_PROFILES = sorted(PEAK_TFLOPS)


def test_every_profile_and_its_default_workload_load():
    names = available(SCENARIOS_DIR / "hardware")
    assert set(GPU_PROFILES) | {"cpu"} <= set(names)
    for name in names:
        profile = load_profile(name)
        assert load_workload(profile.workload).name == profile.workload


@pytest.mark.parametrize("name", GPU_PROFILES)
def test_gpu_profiles_follow_the_design_table(name: str):
    profile = load_profile(name)
    assert profile.peak_tflops == PEAK_TFLOPS[name]
    assert profile.device_count == profile.processes == int(name.split("x")[0])
    assert profile.precision == "bf16" and profile.memory_per_device_gb and profile.timeout_s >= 600
    assert (profile.device, profile.image_flavor) == (("hpu", "hpu") if "Gaudi" in name else ("cuda", "cuda"))


def test_cpu_profile_is_unchanged():
    cpu = load_profile("cpu")
    assert (cpu.device, cpu.precision, cpu.workload, cpu.peak_tflops) == ("cpu", "fp32", "tiny", None)


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_config_is_the_published_architecture(name: str):
    workload = load_workload(name)
    assert workload.model.weights == "random" and workload.model.config == f"{name}/config.json"
    config = AutoConfig.from_pretrained(str(SCENARIOS_DIR / "workloads" / name))
    count = parameter_count(config)
    assert count == pytest.approx(PUBLISHED_PARAMS[name], rel=0.05)
    assert workload.tokenizer.kind == "train_bpe" and workload.tokenizer.vocab_size == config.vocab_size
    assert workload.train.max_length <= config.max_position_embeddings
    assert workload.dataset.synthetic is not None
    modules = {n.rsplit(".", 1)[-1] for n, m in meta_model(config).named_modules() if isinstance(m, torch.nn.Linear)}
    assert set(workload.lora.target_modules) <= modules, modules


def test_llama_2_7b_shapes_by_hand():
    # embed + head 2*32000*4096; per layer 4*4096^2 + 3*4096*11008 + 2*4096; final norm 4096
    expected = 2 * 32000 * 4096 + 32 * (4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096) + 4096
    assert parameter_count(AutoConfig.from_pretrained(str(SCENARIOS_DIR / "workloads" / "llama-2-7b"))) == expected


def test_configs_are_plain_hub_json():
    for name in PUBLISHED_PARAMS:
        data = json.loads((SCENARIOS_DIR / "workloads" / name / "config.json").read_text())
        assert data["architectures"][0].endswith("ForCausalLM") and data["model_type"]


def test_workload_needs_exactly_one_dataset_source():
    data = load_workload("tiny").model_dump()
    data["dataset"] = {"source": "data/tiny_prefs", "synthetic": {"rows": 10}}
    with pytest.raises(ValueError, match="exactly one"):
        Workload.model_validate(data)
    data["dataset"] = {"split": "train"}
    with pytest.raises(ValueError, match="exactly one"):
        Workload.model_validate(data)


def test_sharded_random_checkpoint_loads_through_from_pretrained(tmp_path: Path):
    config = AutoConfig.from_pretrained(str(SCENARIOS_DIR / "workloads" / "tiny"))
    write_random_checkpoint(config, tmp_path, seed=0, shard_bytes=40_000)
    shards = sorted(tmp_path.glob("model-*.safetensors"))
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert len(shards) > 2 and set(index["weight_map"].values()) == {p.name for p in shards}
    model, info = AutoModelForCausalLM.from_pretrained(str(tmp_path), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert model.dtype == torch.bfloat16
    reference = meta_model(config)
    assert {n: p.shape for n, p in model.named_parameters()} == {n: p.shape for n, p in reference.named_parameters()}
    assert model.lm_head.weight.float().std().item() == pytest.approx(0.02, rel=0.1)
    assert torch.all(model.model.norm.weight == 1)


def test_tied_embeddings_are_written_once_and_tied_again(tmp_path: Path):
    config = OPTConfig(
        vocab_size=300,
        hidden_size=32,
        word_embed_proj_dim=32,
        ffn_dim=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=64,
    )
    write_random_checkpoint(config, tmp_path, seed=0)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert "lm_head.weight" not in index["weight_map"]
    model, info = AutoModelForCausalLM.from_pretrained(str(tmp_path), output_loading_info=True)
    assert not info["missing_keys"] and model.lm_head.weight is model.get_input_embeddings().weight


def test_synthetic_prefs_are_long_tailed_and_fit_max_length():
    rows = generate(SyntheticPrefs(rows=300, prompt_median_tokens=128, answer_median_tokens=320), max_length=1024)
    assert len(rows) == 300 and set(rows[0]) == {"prompt", "chosen", "rejected"}
    words = [len(r["prompt"].split()) + len(r["chosen"].split()) for r in rows]
    assert max(words) * TOKENS_PER_WORD <= 1024 + 2
    assert statistics.median(words) * TOKENS_PER_WORD == pytest.approx(128 + 320, rel=0.35)
    assert max(words) > 1.8 * statistics.median(words)  # a long tail, not one length
    assert rows == generate(SyntheticPrefs(rows=300, prompt_median_tokens=128, answer_median_tokens=320), 1024)
