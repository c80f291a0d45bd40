"""`terms.layer_activations` against what a real transformers decoder layer keeps for backward: the storages its
ops save (torch.autograd.graph.saved_tensors_hooks), two layers less one, per token, in bf16 on the CPU, whose
attention kernel keeps what the GPU's fused kernels keep (q, k, v, output and a log-sum-exp)."""

import pytest
import torch
from torch.autograd.graph import saved_tensors_hooks

from bench.estimate import terms
from bench.estimate.shapes import COMPOSITE_ACTIVATIONS, GATED_MLP

TOKENS = 64
HIDDEN, INTERMEDIATE, HEADS = 128, 352, 4


def _saved_bytes(model, trained: bool) -> int:
    """Bytes of the storages the forward saves for backward that are not the model's own weights or buffers."""
    model.train()
    for parameter in model.parameters():
        parameter.requires_grad_(trained)
    if not trained:
        model.enable_input_require_grads()
    own = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers())}
    seen: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return tensor

    torch.manual_seed(0)
    with saved_tensors_hooks(pack, lambda tensor: tensor):
        model(input_ids=torch.randint(0, 100, (1, TOKENS)))
    return sum(size for pointer, size in seen.items() if pointer not in own)


def _per_layer(build, trained: bool) -> float:
    return (_saved_bytes(build(2), trained) - _saved_bytes(build(1), trained)) / TOKENS


def _llama(kv_heads: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    def build(layers: int):
        config = LlamaConfig(hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_attention_heads=HEADS,
                             num_key_value_heads=kv_heads, num_hidden_layers=layers, vocab_size=128,
                             attn_implementation="sdpa")  # fmt: skip
        return LlamaForCausalLM(config).to(torch.bfloat16)

    return build


def _phi(layers: int):
    from transformers import PhiConfig, PhiForCausalLM

    config = PhiConfig(hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_attention_heads=HEADS,
                       num_hidden_layers=layers, vocab_size=128, partial_rotary_factor=0.5, hidden_act="gelu_new",
                       resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0, attn_implementation="sdpa")  # fmt: skip
    return PhiForCausalLM(config).to(torch.bfloat16)


def _counted(kv_dim: int, saved: terms.LayerSaved, attention: terms.AttentionKernel = "fused", b: int = 2) -> float:
    return terms.layer_activations(TOKENS, 1, TOKENS, HIDDEN, kv_dim, INTERMEDIATE, HEADS, b, attention, saved) / TOKENS


@pytest.mark.parametrize("kv_heads", [HEADS, 2])
@pytest.mark.parametrize("trained", [False, True])
def test_an_rmsnorm_swiglu_layer_keeps_what_the_formula_counts(kv_heads, trained):
    trained_inputs = 4 * HIDDEN + INTERMEDIATE if trained else 0
    saved = terms.LayerSaved(norms=2, norm_bytes=4, mlp_bytes=GATED_MLP * 2, trained_inputs=trained_inputs)
    measured = _per_layer(_llama(kv_heads), trained)
    lse = HEADS * 4  # the attention kernel's fp32 log-sum-exp, a row per head: not counted
    assert measured - lse == pytest.approx(_counted(kv_heads * HIDDEN // HEADS, saved), rel=0.01)


def test_a_layernorm_layer_with_a_composite_gelu_keeps_what_the_formula_counts():
    gelu = COMPOSITE_ACTIVATIONS["gelu_new"].saved_bytes(2, autocast=False)
    saved = terms.LayerSaved(norms=1, norm_bytes=2, mlp_bytes=gelu, trained_inputs=0)
    measured = _per_layer(_phi, trained=False)
    lse = HEADS * 4
    assert measured - lse - 2 * 4 == pytest.approx(_counted(HIDDEN, saved), rel=0.01)  # LayerNorm's mean, rstd


def _cuda_autocast_policy(monkeypatch):
    """The CPU stand-in for CUDA's autocast where it differs from the CPU's: layer_norm and pow run on fp32 copies
    of their floating inputs (AutocastTestLists.torch_fp32), and a linear casts its input to its weight's dtype."""
    functional = torch.nn.functional
    layer_norm, linear, power = functional.layer_norm, functional.linear, torch.pow

    def up(x):
        return x.float() if isinstance(x, torch.Tensor) and x.is_floating_point() else x

    monkeypatch.setattr(functional, "layer_norm", lambda x, shape, w=None, b=None, eps=1e-5: layer_norm(
        up(x), shape, up(w), up(b), eps))  # fmt: skip
    monkeypatch.setattr(functional, "linear", lambda x, w, b=None: linear(x.to(w.dtype), w, b))
    monkeypatch.setattr(torch, "pow", lambda x, e: power(up(x), e))


def test_under_cuda_autocast_a_layernorm_layer_keeps_its_norm_input_and_most_of_gelu_in_fp32(monkeypatch):
    _cuda_autocast_policy(monkeypatch)
    gelu = COMPOSITE_ACTIVATIONS["gelu_new"].saved_bytes(2, autocast=True)
    assert gelu == 2 + 3 * 4  # `0.5 * input` in bf16; pow's input copy, tanh's output and `1 + tanh` in fp32
    saved = terms.LayerSaved(norms=1, norm_bytes=4, mlp_bytes=gelu, trained_inputs=0)
    measured = _per_layer(_phi, trained=False)
    lse, norm_stats = HEADS * 4, 2 * 4
    weights = 2 * HIDDEN * 4 / TOKENS  # the norm's weight and bias cast to fp32: a layer's, not a token's
    assert measured - lse - norm_stats - weights == pytest.approx(_counted(HIDDEN, saved), rel=0.01)


def test_each_workload_model_names_what_its_layers_keep():
    from bench.estimate.shapes import LayerSaves, layer_saves
    from bench.matrix.profiles import load_workload

    llama, phi = load_workload("llama-3.2-1b"), load_workload("phi-2")
    for autocast in (False, True):  # RMSNorm and SwiGLU run alike under CUDA's autocast
        assert layer_saves(llama, 2, autocast) == LayerSaves(norms=2, norm_bytes=4, mlp_bytes=3 * 2, gated=True)
    assert layer_saves(phi, 2) == LayerSaves(norms=1, norm_bytes=2, mlp_bytes=4 * 2, gated=False)
    assert layer_saves(phi, 2, autocast=True) == LayerSaves(norms=1, norm_bytes=4, mlp_bytes=2 + 3 * 4, gated=False)
    assert layer_saves(phi, 2, native_activation=True).mlp_bytes == 2  # LitGPT's own GELU


def _opt(layers: int):
    from transformers import OPTConfig, OPTForCausalLM

    config = OPTConfig(hidden_size=HIDDEN, ffn_dim=INTERMEDIATE, num_attention_heads=HEADS, num_hidden_layers=layers,
                       vocab_size=128, word_embed_proj_dim=HIDDEN, dropout=0.1, attention_dropout=0.0,
                       attn_implementation="sdpa")  # fmt: skip
    return OPTForCausalLM(config).to(torch.bfloat16)


def test_a_layernorm_relu_layer_keeps_its_two_residual_dropouts_noise_on_the_cpu():
    # OPT's functional dropouts after out_proj and fc2 stay active in every method; on a CPU each keeps its scaled
    # noise in the activations' dtype (on a GPU aten's native_dropout keeps a bool mask)
    saved = terms.LayerSaved(norms=2, norm_bytes=2, mlp_bytes=2, trained_inputs=0, dropout_mask_bytes=2 * 2)
    measured = _per_layer(_opt, trained=False)
    lse, norm_stats = HEADS * 4, 2 * 2 * 4  # the kernel's log-sum-exp; each LayerNorm's fp32 mean and rstd
    assert measured - lse - norm_stats == pytest.approx(_counted(HIDDEN, saved), rel=0.01)


def _eager(build_config):
    def build(layers: int):
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_config(build_config(layers)).to(torch.bfloat16)

    return build


def _gemma2_config(layers: int):
    from transformers import Gemma2Config

    return Gemma2Config(hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_attention_heads=HEADS,
                        num_key_value_heads=HEADS, head_dim=HIDDEN // HEADS, num_hidden_layers=layers,
                        vocab_size=128, attn_logit_softcapping=None, final_logit_softcapping=None,
                        sliding_window=4096, attention_dropout=0.0, layer_types=["full_attention"] * layers,
                        attn_implementation="eager")  # fmt: skip


def _llama_config(layers: int):
    from transformers import LlamaConfig

    return LlamaConfig(hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_attention_heads=HEADS,
                       num_hidden_layers=layers, vocab_size=128, attn_implementation="eager")  # fmt: skip


def test_the_model_classes_say_how_many_norms_a_layer_has_and_gemma_2s_four_each_keep_their_input():
    from transformers import AutoModelForCausalLM

    from bench.estimate.shapes import shapes_of

    with torch.device("meta"):
        gemma, llama = (AutoModelForCausalLM.from_config(c(2)) for c in (_gemma2_config, _llama_config))
    assert (shapes_of(gemma).layer_norms, shapes_of(llama).layer_norms) == (4, 2)
    assert not shapes_of(gemma).layer_norm and shapes_of(gemma).gated_mlp
    # the same layer but for Gemma 2's two norms more (eager attention: Gemma 2 has no sdpa path), its MLP frozen
    extra = _per_layer(_eager(_gemma2_config), False) - _per_layer(_eager(_llama_config), False)
    assert extra == pytest.approx(2 * 4 * HIDDEN, rel=0.05)


def test_a_layernorm_models_facts_come_from_its_classes():
    from transformers import GPT2Config, GPT2LMHeadModel, OPTConfig, OPTForCausalLM, PhiConfig, PhiForCausalLM

    from bench.estimate.shapes import shapes_of

    with torch.device("meta"):
        phi = PhiForCausalLM(PhiConfig(hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_attention_heads=HEADS,
                                       num_hidden_layers=1, vocab_size=128))  # fmt: skip
        opt = OPTForCausalLM(OPTConfig(hidden_size=HIDDEN, ffn_dim=INTERMEDIATE, num_attention_heads=HEADS,
                                       num_hidden_layers=1, vocab_size=128, word_embed_proj_dim=HIDDEN))  # fmt: skip
        gpt2 = GPT2LMHeadModel(GPT2Config(n_embd=HIDDEN, n_head=HEADS, n_layer=1, vocab_size=128))  # Conv1D MLP
    facts = [(s.layer_norms, s.layer_norm, s.gated_mlp) for s in map(shapes_of, (phi, opt, gpt2))]
    assert facts == [(1, True, False), (2, True, False), (2, True, False)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_eager_attention_keeps_its_fp32_probabilities_and_their_cast_but_not_its_output(dtype):
    b = dtype.itemsize
    saved = terms.LayerSaved(norms=2, norm_bytes=4, mlp_bytes=GATED_MLP * b, trained_inputs=0)

    def build(layers: int):
        return _eager(_llama_config)(layers).to(dtype)

    measured = _per_layer(build, trained=False)
    assert measured == pytest.approx(_counted(HIDDEN, saved, "eager", b), rel=0.01)
    assert measured != pytest.approx(_counted(HIDDEN, saved, "math", b), rel=0.01)  # 2b per score and the output


@pytest.mark.parametrize("clamped", [False, True])
def test_a_2023_llama_eager_attention_keeps_its_clamped_scores_as_well(clamped):
    # transformers' Llama eager attention of mid-2023 (Knobs.eager_clamp), on bf16 q, k, v of one row
    q, k, v = (torch.randn(1, HEADS, TOKENS, HIDDEN // HEADS, dtype=torch.bfloat16, requires_grad=True) for _ in "qkv")
    mask = torch.zeros(1, 1, TOKENS, TOKENS, dtype=torch.bfloat16)
    seen: dict[int, int] = {}

    def pack(tensor):
        if tensor.dim():  # the clamp's bound is a 0-dim tensor: a layer's, not a score's
            seen[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    with saved_tensors_hooks(pack, lambda tensor: tensor):
        scores = torch.matmul(q, k.transpose(2, 3)) + mask
        if clamped:
            scores = torch.max(scores, torch.tensor(torch.finfo(scores.dtype).min))
        probabilities = torch.nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        torch.matmul(probabilities, v)
    inputs = {t.untyped_storage().data_ptr() for t in (q, k, v)}
    measured = sum(size for pointer, size in seen.items() if pointer not in inputs)
    counted = terms.attention_saved("eager", TOKENS, 1, TOKENS, HIDDEN, HIDDEN, HEADS, 2, clamped)
    assert measured == counted - TOKENS * 2 * 3 * HIDDEN  # less q, k and v, the inputs here
