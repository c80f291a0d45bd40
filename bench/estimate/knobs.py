"""The settings users turn that change memory, as parameters of a prediction (`predict_cell(..., knobs=Knobs(...))`).
Each defaults to what the cell and its workload run with; docs/estimator.md ("Knobs") gives every term and its source.
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from bench.estimate.length_spread import LengthSpread, synthetic_spread
from bench.matrix.axes import Method
from bench.matrix.precision import Mode
from bench.matrix.profiles import Attention, Optimizer, Workload

BnbKeptInputs = Literal["none", "step", "previous_step"]
"""What a bitsandbytes before 0.43.2 keeps of its 4-bit linears' inputs (bench/estimate/terms.py `bnb_kept_inputs`):
none (0.43.2 on, or no 4-bit model); the step's own; also those of the previous step, whose graph the training loop
still references while the next forward runs (LitGPT's `logits`)."""

Loss = Literal["fused", "full_fp32", "full", "chunked_fp32", "chunked"]
"""How the loss meets the vocabulary (bench/estimate/terms.py `logits_bytes_per_element`): TRL 1.16's fused chunked
head, or materialised logits: upcast to fp32 (transformers' causal-LM loss), in the compute dtype (a model's own
CrossEntropyLoss), or chunked over tokens with every chunk kept (torchtune's CEWithChunkedOutputLoss upcasting each
chunk, LitGPT's chunked_cross_entropy not)."""

DEFAULT_OPTIMIZER: Optimizer = "adamw_torch_fused"
"""transformers 5 TrainingArguments.optim with torch >= 2.8 (training_args.py `default_optim`); the suite sets none."""


class Knobs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    optimizer: Optimizer = DEFAULT_OPTIMIZER
    gradient_checkpointing: bool | None = None
    """None: the workload's setting, off for a cell with the no_gc option."""
    attention: Attention | None = None
    """None: what transformers 5 picks, `sdpa` (PyTorch's scaled_dot_product_attention) on every device."""
    padding_free: bool = False
    """Rows packed without padding (TRL `padding_free`, SFT `packing`)."""
    liger: bool | None = None
    """Liger's layer kernels (TRL `use_liger_kernel`); None: the cell's liger option."""
    offload_params: bool = False
    """Parameters on the host: FSDP `CPUOffloadPolicy` / `cpu_offload`, ZeRO-3 `offload_param: cpu`."""
    method: Method | None = None
    """None: the cell's method; an id of bench/matrix/axes.py Method, where a method is added once. Each method's
    rows, reference and output (bench/matrix/methods.py): DPO (2 rows per pair + a reference), SFT (1 row, no
    reference), reward modelling (2 rows, a scalar head instead of the LM head, no reference), KTO (1 row + a KL
    batch without gradient, a reference), ORPO / SimPO (2 rows, full logits, no reference)."""
    max_length: int | None = Field(default=None, ge=8)
    """Tokens per row (None: the workload's max_length)."""
    batch_size: int | None = Field(default=None, ge=1)
    """Examples per device and step (None: the workload's per_device_train_batch_size)."""
    loss: Loss = "fused"
    optimizer_in_backward: bool = False
    """Each parameter is stepped as soon as its gradient exists and the gradient freed (torchtune's optimizer_in_bwd):
    never more than the largest parameter's gradient at once."""
    expandable_segments: bool = False
    """PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (bench/estimate/gpu_terms.allocator_overhead)."""
    length_spread: LengthSpread | None = None
    """The lengths of the rows a run pads batch by batch (bench/estimate/length_spread.py, read by
    gpu_terms.earlier_records); None: every step at max_length."""
    master_weights: bool = True
    """False: pure 16-bit training (no fp32 copy anywhere, adapters and optimizer states in the compute dtype, as
    torchtune does)."""
    precision: Mode | None = None
    """None: the profile's precision with `master_weights`; else the mode (bench/matrix/precision.py): `pure-bf16`
    sets master_weights False, `fp16-mixed` loads fp32 weights and computes in fp16."""
    bnb_kept_inputs: BnbKeptInputs = "none"
    """A published row's bitsandbytes before 0.43.2 (MatMul4Bit keeps each input); the suite's cells run a later one."""
    quantized_head: bool = False
    """The LM head is a 4-bit linear too (LitGPT: its head is an nn.Linear, which Lightning's BitsandbytesPrecision
    replaces like every other); else bitsandbytes through transformers, which leaves the output layer unquantized."""
    fp16_quant_state: bool = False
    """The 4-bit weights were quantised from an fp16 copy (Lightning's `_quantize_weight`:
    `weight.contiguous().to(device="cuda", dtype=torch.half)`), so MatMul4Bit dequantises into fp16 and casts that
    to the compute dtype (`F.dequantize_4bit(B, quant_state).to(A.dtype)`): two copies of the layer at once."""
    eager_clamp: bool = False
    """A published row's transformers of mid-2023: Llama's eager attention clamped the masked scores,
    `torch.max(attn_weights, torch.tensor(torch.finfo(attn_weights.dtype).min))` (modeling_llama.py as
    huggingface/transformers#24561, merged July 2023, left it), and torch.max's backward keeps them
    (terms.attention_saved)."""
    litgpt_model: bool = False
    """The model is LitGPT's own code (lit_gpt/model.py, lit_gpt/lora.py), not transformers': query, key and value
    are one fused linear whose LoRA drops its input once (LoRAQKVLinear: `F.linear(self.lora_dropout(x),
    self.lora_A)`), its attention keeps more of the fused output (terms.litgpt_attention) and its GELU is torch's
    own kernel (shapes.layer_saves)."""
    torch_compile: bool = False
    """torch.compile on (TrainingArguments.torch_compile, torchtune's `compile: True`): a compiled chunked fp32 loss
    keeps only its logits (terms.logits_bytes_per_element); no other memory term (no traced compiled layer); its
    speed: bench/estimate/speed/knob_factors.py."""


def knobs_of(workload: Workload) -> Knobs:
    """The knobs the workload's settings turn (bench/matrix/settings.py apply_to_workload: the optimizer and what
    `--attention`, `--liger`, `--torch-compile` and `--precision pure-bf16` set) and its synthetic rows' lengths;
    the others at their defaults."""
    train, synthetic = workload.train, workload.dataset.synthetic
    return Knobs(
        optimizer=train.optim or DEFAULT_OPTIMIZER,
        attention=train.attn_implementation,
        liger=train.use_liger_kernel,
        torch_compile=bool(train.torch_compile),
        master_weights=train.master_weights is not False,
        length_spread=None
        if synthetic is None
        else synthetic_spread(
            synthetic.prompt_median_tokens, synthetic.answer_median_tokens, synthetic.sigma, synthetic.rows, train.steps
        ),
    )
