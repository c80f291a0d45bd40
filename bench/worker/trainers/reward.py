"""Reward model: TRL's RewardTrainer over the pairs, on the checkpoint with a one-output sequence-classification
head (the `score` layer that Llama, Mistral, Phi and OPT name alike), no reference.

The head starts at zero, as LoRA's B does: every reward is 0 at step 1, so the first loss is -log sigmoid(0) = ln 2
(bench/judge/learning.py). After training, `evaluate` measures the pairwise accuracy on the first EVAL_PAIRS
training pairs, the learning check's evidence that the model learned to rank chosen over rejected."""

from typing import Any

from bench.worker.models import build_models, load_pretrained
from bench.worker.spec import WorkerSpec
from bench.worker.trainer_args import common_arguments
from bench.worker.trainers import assemble, inputs

EVAL_PAIRS = 128
MODEL_CLASS = "AutoModelForSequenceClassification"
MODEL_KWARGS = {"num_labels": 1}
"""A one-output sequence-classification head: the reward."""
LORA_TASK = "SEQ_CLS"
"""The LoRA task type of a reward model's adapter (PEFT then also trains the head)."""
HEADS = ("score", "classifier")
"""The names transformers gives a sequence-classification head (PEFT's SEQ_CLS modules_to_save)."""
HEADS_IN = frozenset(HEADS)


def head_parameters(model: Any) -> list[Any]:
    """The sequence-classification head's parameters, and those of PEFT's trained copy of it."""
    return [p for name, p in model.named_parameters() if HEADS_IN.intersection(name.split("."))]


def _materialised_heads(model: Any) -> None:
    """Give a head left on the meta device real (empty) storage, on the device of the model's other weights.

    The head is not in a causal LM's checkpoint; with accelerate's FSDP launch (FSDP_CPU_RAM_EFFICIENT_LOADING)
    transformers leaves such missing weights on the meta device on every rank but the first, for FSDP to broadcast
    rank 0's. Where FSDP does not take over (a CPU profile runs it as DDP), the trainer's `model.to(device)` then
    fails ("Cannot copy out of meta tensor"). The head is zeroed next anyway, so rank 0's values are every rank's."""
    loaded = next((p.device for p in model.parameters() if p.device.type != "meta"), "cpu")
    for name, module in model.named_modules():
        own = list(module.parameters(recurse=False))
        if HEADS_IN.intersection(name.split(".")[-1:]) and any(p.is_meta for p in own):
            module.to_empty(device=loaded, recurse=False)


def _zeroed(head: list[Any]) -> None:
    """Zero the head's weights. Under ZeRO-3's zero.Init each rank holds a partition of them (the parameter itself
    is an empty placeholder): they are gathered, zeroed on rank 0 and partitioned again."""
    import contextlib

    import torch

    gathered: Any = contextlib.nullcontext()
    if any(hasattr(p, "ds_id") for p in head):
        import deepspeed

        gathered = deepspeed.zero.GatheredParameters(head, modifier_rank=0)
    with gathered, torch.no_grad():
        for parameter in head:
            parameter.zero_()


def load_reward_model(spec: WorkerSpec) -> Any:
    model = load_pretrained(spec, MODEL_CLASS, **MODEL_KWARGS)
    _materialised_heads(model)
    head = head_parameters(model)
    if not head:
        raise ValueError(f"{type(model).__name__} has no sequence-classification head named {' or '.join(HEADS)}")
    _zeroed(head)
    return model


def arguments(spec: WorkerSpec) -> dict[str, Any]:
    """RewardConfig's keyword arguments (also what an exported recipe writes)."""
    return common_arguments(spec)


def trainer(spec: WorkerSpec, callbacks: list[Any]) -> Any:
    from trl import RewardConfig, RewardTrainer

    args = RewardConfig(**arguments(spec))
    tokenizer, dataset = inputs(spec)
    return assemble(
        RewardTrainer,
        args,
        build_models(spec, load=load_reward_model, task=LORA_TASK),
        tokenizer,
        dataset,
        callbacks,
        reference=False,
    )


def evaluate(spec: WorkerSpec, trained: Any) -> tuple[float, int]:
    """(pairwise accuracy, pairs): the share of the first EVAL_PAIRS training pairs whose chosen answer the trained
    model scores above the rejected one, through the trainer's own evaluation (every rank takes part)."""
    _, dataset = inputs(spec)
    pairs = dataset.select(range(min(EVAL_PAIRS, len(dataset))))
    metrics = trained.evaluate(eval_dataset=pairs)
    return float(metrics["eval_accuracy"]), len(pairs)
