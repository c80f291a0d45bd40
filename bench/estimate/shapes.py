"""Parameter counts by role, read from a workload's config.json on the meta device (no weights, no memory)."""

import dataclasses
import functools
import json
from dataclasses import dataclass
from pathlib import Path

from bench.assets.config_cache import cached
from bench.matrix.profiles import Workload
from bench.paths import scenarios_dir


@dataclass(frozen=True)
class Linear:
    name: str
    """Dotted module name inside the model."""
    in_features: int
    out_features: int
    bias: bool


@dataclass(frozen=True)
class ModelShapes:
    total: int
    """Every parameter once (a tied LM head counted once)."""
    embeddings: int
    """Input lookup tables (token and learned position embeddings)."""
    lm_head: int
    """The output projection; 0 when tied to the input embedding (its bytes are in `embeddings`)."""
    linear_weights: int
    """Weights of nn.Linear layers inside the decoder (what bitsandbytes quantizes)."""
    linear_rows: int
    """Sum of out_features of those layers (int8 keeps one fp32 scale per row)."""
    experts: int
    """Mixture-of-experts weights held as fused 3-D tensors (not nn.Linear: bitsandbytes leaves them unquantized)."""
    other: int
    """Norms, biases, routers: everything else, kept in the compute dtype."""
    largest_layer: int
    """DeepSpeed's `largest_layer_params`: max over modules of their own (non-recursive) parameters."""
    largest_linear: int
    """Largest single quantized linear weight (bitsandbytes dequantizes one at a time)."""
    largest_block: int
    """Parameters of the largest decoder layer (FSDP's wrap unit)."""
    linears: tuple[Linear, ...]
    hidden: int
    intermediate: int
    """MLP width per token (summed over the experts a token is routed to)."""
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    layer_norms: int
    """Norms in a decoder layer outside its attention (each keeps its input): 2 in Llama's, 1 in phi's shared one, 4
    in Gemma 2's."""
    layer_norm: bool
    """The decoder's norms are nn.LayerNorm, which keeps its input as it is; otherwise RMSNorm, which every
    transformers model runs on its input upcast to fp32 (LlamaRMSNorm `hidden_states.to(torch.float32)`)."""
    gated_mlp: bool
    """The MLP multiplies an activated projection by another (SwiGLU, GeGLU: gate and up, or one fused gate_up);
    False where one projection to the intermediate width feeds the activation (phi's fc1, OPT's fc1)."""
    activation: str
    """The MLP's activation as the config names it (`hidden_act`, `activation_function`): COMPOSITE_ACTIVATIONS."""
    rotary_dims: int
    """Dimensions of each query and key head the rotary embedding turns: twice its `inv_freq` buffer's length (all
    of Llama's head, 40 % of phi-2's); 0 where positions are learned embeddings (OPT, GPT-2)."""

    @property
    def layer_linears(self) -> int:
        """Linears in one decoder layer (q, k, v, o, gate, up, down: 7 in Llama's; a fused qkv counts once)."""
        return len(self.linears) // self.layers

    def lora_params(self, r: int, target_modules: list[str]) -> int:
        """LoRA A (r x in) and B (out x r) for every decoder linear whose last name component is a target."""
        return sum(rows * cols for rows, cols in self.lora_tensors(r, target_modules))

    def linear_names(self) -> list[str]:
        """The decoder's linear layer names, as LoRA targets name them (the last part of each path), sorted."""
        return sorted({lin.name.split(".")[-1] for lin in self.linears})

    def lora_targets(self, target_modules: list[str]) -> list[Linear]:
        """The linears LoRA adapts; `all-linear` (PEFT's shorthand) targets every decoder linear."""
        targets = set(target_modules)
        return [lin for lin in self.linears if "all-linear" in targets or lin.name.split(".")[-1] in targets]

    def lora_tensors(self, r: int, target_modules: list[str]) -> list[tuple[int, int]]:
        """(rows, cols) of every LoRA A and B."""
        chosen = self.lora_targets(target_modules)
        return [shape for lin in chosen for shape in ((r, lin.in_features), (lin.out_features, r))]

    def full_tensors(self) -> list[tuple[int, int]]:
        """(rows, cols) of every parameter for a full fine-tune: the linears, the embedding and LM head as V x H,
        the fused experts and every 1-D parameter as one vector each (their shapes matter only for thresholds)."""
        tables = [(self.vocab, self.embeddings // self.vocab)] if self.embeddings else []
        head = [(self.vocab, self.lm_head // self.vocab)] if self.lm_head else []
        rest = [(n, 1) for n in (self.experts, self.other) if n]
        return [(lin.out_features, lin.in_features) for lin in self.linears] + tables + head + rest


def config_path(workload: Workload) -> Path:
    """The config.json the workload's shapes are read from: its model's config, else the one in its model's local
    folder. Kept per model and scenario folder: resolving the path reads the file system, and one `advise` asks for
    it thousands of times."""
    model = workload.model
    key = (model.config, model.source, str(scenarios_dir()))
    if (found := _LOCATED.get(key)) is None:
        if model.config_file is not None:
            found = model.config_file
        elif model.source is not None and (Path(model.source) / "config.json").is_file():
            found = Path(model.source) / "config.json"
        else:
            raise ValueError(f"workload {workload.name}: no local config.json to read the model's shape from")
        _LOCATED[key] = found
    return found


_LOCATED: dict[tuple[str | None, str | None, str], Path] = {}


def shapes_for(workload: Workload) -> ModelShapes:
    return shapes_from_config(str(config_path(workload)))


@dataclass(frozen=True)
class Activation:
    """What an ungated MLP's activation keeps for backward and reads and writes in its forward, in [t, I] tensors as
    (in the compute dtype, in fp32): as its ops run without autocast, and as CUDA's autocast runs them
    (bench/matrix/precision.py `cuda_autocast`: torch.pow is in its fp32 list, the CPU's is not)."""

    saved: tuple[int, int]
    passes: tuple[int, int]
    """One per operand read and result written, op by op."""
    autocast_saved: tuple[int, int]
    autocast_passes: tuple[int, int]

    def saved_bytes(self, compute_bytes: int, autocast: bool) -> int:
        """Bytes it keeps per [t, I] element."""
        low, fp32 = self.autocast_saved if autocast else self.saved
        return low * compute_bytes + fp32 * 4

    def pass_bytes(self, compute_bytes: int, autocast: bool) -> int:
        """Bytes its forward moves per [t, I] element."""
        low, fp32 = self.autocast_passes if autocast else self.passes
        return low * compute_bytes + fp32 * 4


NATIVE_ACTIVATION = Activation(saved=(1, 0), passes=(2, 0), autocast_saved=(1, 0), autocast_passes=(2, 0))
"""One aten kernel (relu, gelu, silu; none in autocast's fp32 list): keeps its input, reads it, writes its output."""
COMPOSITE_ACTIVATIONS = {
    "gelu_new": Activation(saved=(4, 0), passes=(18, 0), autocast_saved=(1, 3), autocast_passes=(6, 16)),
}
"""hidden_act values transformers runs as a Python composite. NewGELUActivation is `0.5 * input * (1.0 +
torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))`, eight ops over [t, I]:
- without autocast it keeps pow's input, the tanh's output, `0.5 * input` and `1 + tanh` (measured on phi-2's shapes
  with saved-tensor hooks), and its ops read and write 18 tensors;
- under CUDA's autocast pow runs on an fp32 copy of its input, which it keeps, and type promotion carries fp32 to
  the end: tanh's output and `1 + tanh` are fp32, `0.5 * input` stays in the compute dtype, and the product is fp32,
  which the next linear casts back. The casts add a read and a write each: 6 passes in the compute dtype, 16 in fp32
  (tests/unit/estimate/test_layer_saved.py holds the saved tensors to the real op under that policy)."""
GATED_MLP = 3
"""SwiGLU's `down(act(gate(x)) * up(x))` with its linears frozen keeps gate's output (the activation's input), the
activation's output and up's output (measured: three [t, I] tensors a layer on Llama-2-7B's shapes)."""


@dataclass(frozen=True)
class LayerSaves:
    """What a decoder layer's own code keeps for backward besides attention's tensors, by architecture."""

    norms: int
    """Norms a layer has: each keeps its input."""
    norm_bytes: int
    """Bytes a norm keeps per element of its input. RMSNorm upcasts its input to fp32 and keeps that (LlamaRMSNorm
    `hidden_states.to(torch.float32)`, LitGPT's RMSNorm `x.float()`): 4 whatever the activations' dtype. LayerNorm
    keeps its input as it is, which CUDA's autocast has cast to fp32 (layer_norm is in its fp32 list)."""
    mlp_bytes: int
    """Bytes the MLP keeps per [t, I] element with its linears frozen: GATED_MLP tensors in the compute dtype, or
    what its activation keeps (Activation.saved_bytes)."""
    gated: bool


def layer_saves(
    workload: Workload, compute_bytes: int, autocast: bool = False, native_activation: bool = False
) -> LayerSaves:
    """The workload's model's LayerSaves in the compute dtype, `autocast`: under CUDA's (precision.cuda_autocast);
    `native_activation`: its activation is torch's own kernel whatever the config names (LitGPT's GptNeoxMLP calls
    `torch.nn.functional.gelu`)."""
    shapes = shapes_for(workload)
    norm_bytes = compute_bytes if shapes.layer_norm and not autocast else 4
    if shapes.gated_mlp:
        mlp = GATED_MLP * compute_bytes
    else:
        mlp = activation_of(shapes, native_activation).saved_bytes(compute_bytes, autocast)
    return LayerSaves(norms=shapes.layer_norms, norm_bytes=norm_bytes, mlp_bytes=mlp, gated=shapes.gated_mlp)


def activation_of(shapes: ModelShapes, native: bool = False) -> Activation:
    """The ungated MLP's activation: a composite transformers runs op by op, or one aten kernel."""
    return NATIVE_ACTIVATION if native else COMPOSITE_ACTIVATIONS.get(shapes.activation, NATIVE_ACTIVATION)


LAST_GEMM_DROPOUT: dict[str, tuple[str, bool]] = {
    "phi": ("resid_pdrop", True),
    "phi3": ("resid_pdrop", True),
    "opt": ("dropout", False),
}
"""model_type -> (the config key of the dropout applied to a decoder layer's last linear output, whether it is an
nn.Dropout module): transformers 5.23 PhiDecoderLayer `self.resid_dropout(self.mlp(hidden_states))`,
Phi3DecoderLayer `self.resid_mlp_dropout(hidden_states)`, OPTDecoderLayer `nn.functional.dropout(hidden_states,
p=self.dropout, ...)` after fc2. TRL's `disable_dropout` zeroes modules only (trl/trainer/utils.py
`disable_dropout_in_model`)."""


def last_gemm_dropout(workload: Workload) -> tuple[float, bool]:
    """(probability, is a module) of the dropout after each decoder layer's last linear; (0, True) where there is
    none or no config.json is local."""
    config = _config_of(workload)
    key, module = LAST_GEMM_DROPOUT.get(str(config.get("model_type", "")), ("", True))
    return float(config.get(key) or 0.0), module


def _config_of(workload: Workload) -> dict:
    try:
        return _config(str(config_path(workload)))
    except ValueError:
        return {}


@functools.cache
def _config(config_file: str) -> dict:
    """The config.json's keys ({} where there is none to read)."""
    try:
        return dict(json.loads(Path(config_file).read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {}


@functools.cache
def shapes_from_config(config_file: str) -> ModelShapes:
    """The shapes of the model `config_file` describes (kept on disk: bench/assets/config_cache.py)."""
    return cached("shapes", Path(config_file), lambda: built_on_meta(config_file), dataclasses.asdict, _from_json)


def _from_json(data: dict) -> ModelShapes:
    linears = tuple(Linear(**lin) for lin in data.pop("linears"))
    return ModelShapes(**data, linears=linears)


def built_on_meta(config_file: str) -> ModelShapes:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(Path(config_file).parent))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return shapes_of(model)


def _mlp_width(config) -> int:
    """One MLP's (one expert's) intermediate width as the config names it."""
    return getattr(config, "intermediate_size", None) or getattr(config, "ffn_dim", None) or 4 * config.hidden_size


def _intermediate(config) -> int:
    """The MLP's inner width a token passes through: a mixture of experts' top-k experts count as one wider MLP."""
    intermediate = _mlp_width(config)
    top_k = getattr(config, "num_experts_per_tok", None)
    if getattr(config, "num_local_experts", None) and top_k:
        intermediate *= top_k
    return intermediate


def shapes_of(model) -> ModelShapes:
    import torch

    config = model.config
    unique: dict[int, int] = {}
    for p in model.parameters():
        unique[id(p)] = p.numel()
    total = sum(unique.values())
    embedding_ids = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    embeddings = sum(unique[i] for i in embedding_ids)
    output = model.get_output_embeddings()
    lm_head_id = id(output.weight) if output is not None else None
    lm_head = 0 if lm_head_id is None or lm_head_id in embedding_ids else unique[lm_head_id]
    linears, counted = [], set(embedding_ids) | ({lm_head_id} if lm_head_id else set())
    linear_weights = linear_rows = largest_linear = experts = largest_layer = 0
    for name, module in model.named_modules():
        own = list(module.parameters(recurse=False))
        largest_layer = max(largest_layer, sum(p.numel() for p in own))
        if isinstance(module, torch.nn.Linear) and id(module.weight) != lm_head_id:
            linears.append(Linear(name, module.in_features, module.out_features, module.bias is not None))
            linear_weights += module.weight.numel()
            linear_rows += module.out_features
            largest_linear = max(largest_linear, module.weight.numel())
            counted.add(id(module.weight))
        elif not isinstance(module, torch.nn.Embedding):
            for p in own:
                if p.dim() == 3 and id(p) not in counted:
                    experts += p.numel()
                    counted.add(id(p))
    other = total - embeddings - lm_head - linear_weights - experts
    blocks = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]
    largest_block = max((sum(p.numel() for p in b.parameters()) for blk in blocks for b in blk), default=0)
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    return ModelShapes(
        total=total,
        embeddings=embeddings,
        lm_head=lm_head,
        linear_weights=linear_weights,
        linear_rows=linear_rows,
        experts=experts,
        other=other,
        largest_layer=largest_layer,
        largest_linear=largest_linear,
        largest_block=largest_block,
        linears=tuple(linears),
        hidden=config.hidden_size,
        intermediate=_intermediate(config),
        layers=config.num_hidden_layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        vocab=config.vocab_size,
        **_layer_facts(blocks, config),
        activation=str(getattr(config, "hidden_act", None) or getattr(config, "activation_function", None) or ""),
        rotary_dims=_rotary_dims(model),
    )


def _rotary_dims(model) -> int:
    """Twice the length of the rotary embedding's `inv_freq` buffer (a frequency per pair of dimensions it turns);
    0 where the model has none."""
    found = [
        m.inv_freq.numel() for m in model.modules() if "RotaryEmbedding" in type(m).__name__ and hasattr(m, "inv_freq")
    ]
    return 2 * max(found, default=0)


def _projection(module) -> tuple[int, int] | None:
    """(in, out) features of a linear: nn.Linear, or transformers' Conv1D (GPT-2's, its weight stored [in, out])."""
    import torch

    if isinstance(module, torch.nn.Linear):
        return module.in_features, module.out_features
    if type(module).__name__ == "Conv1D":
        return tuple(module.weight.shape)
    return None


def _layer_facts(blocks: list, config) -> dict[str, int | bool]:
    """ModelShapes' layer_norms, layer_norm and gated_mlp of the first decoder layer (the first module
    of the largest ModuleList), its attention module's own left out (Qwen3's per-head q/k norms). The MLP is not gated
    where its linears from the hidden width project to the config's intermediate width in all (a mixture of experts'
    router projects to its expert count: its fused experts are gated)."""
    import torch

    layer = max(blocks, key=lambda b: sum(p.numel() for p in b.parameters()))[0]
    attention = {name for name, child in layer.named_children() if "Attention" in type(child).__name__}
    outside = [(n, m) for n, m in layer.named_modules() if n and n.split(".")[0] not in attention]
    norms = [m for _, m in outside if isinstance(m, torch.nn.LayerNorm) or type(m).__name__.endswith("Norm")]
    hidden = config.hidden_size
    widths = [shape[1] for _, m in outside if (shape := _projection(m)) is not None and shape[0] == hidden]
    layer_norm = bool(norms) and all(isinstance(m, torch.nn.LayerNorm) for m in norms)
    return {"layer_norms": len(norms), "layer_norm": layer_norm, "gated_mlp": sum(widths) != _mlp_width(config)}
