"""The training-method table: one entry per method, naming its TRL trainer and the worker module that builds it
(bench/worker/trainers/<trainer_module>.py), and what the rest of the suite needs to know about it: whether it has a
reference (the N/A rules), the form of its data (bench/assets), its model's head and how its loss reads the
model's output (the estimator), its forward passes (MFU). A new method is its enum value, one entry here and its
trainer module."""

import math
from dataclasses import dataclass, field
from typing import Literal

from bench.matrix.axes import Method

DataForm = Literal["pairs", "completions", "unpaired", "prompts"]
"""The rows a trainer reads, all derived from the workload's preference pairs (bench/assets/method_data.py):
`pairs` (prompt, chosen, rejected), `completions` (prompt and its chosen answer: SFT) or `unpaired` (each pair as
a desirable and an undesirable (prompt, completion, label) row, interleaved: KTO) or `prompts` (the prompts alone:
the online methods generate their own completions)."""

QloraCast = Literal["always", "nf4_bf16"]
"""When a trainer casts a quantized model's trained adapters to bf16 (the QLoRA recipe): `always` (TRL 1.16's
SFT, DPO, KTO, Reward, GRPO and RLOO trainers cast every trainable parameter), or only a 4-bit model's under
bf16=True (`nf4_bf16`: the experimental ORPO and CPO trainers' peft_module_casting_to_bf16). Otherwise PEFT keeps
them in fp32 (autocast_adapter_dtype)."""

Output = Literal["fused_logprobs", "full_logits", "scalar"]
"""How the loss reads the model's output: TRL 1.16's fused LM head (log-probs in tiles, the full logits never
exist: DPO, KTO, SFT), the model's full logits (the experimental ORPO and CPO/SimPO trainers call the model
without the fused head), or one scalar per sequence from a sequence-classification head (reward)."""


LN2 = math.log(2.0)


@dataclass(frozen=True)
class LearningRule:
    """What a method's learning check holds its losses to (bench/judge/learning.py says why each value holds)."""

    first_loss: float | None = None
    """The exact step-1 loss the method's formula gives at policy = reference (DPO, reward: ln 2; KTO: 1/2), or
    None where it depends on the initial model's log-probs of the batch (SFT, ORPO, SimPO)."""
    first_loss_meaning: str = ""
    """What a first loss away from it means."""
    falls: bool = True
    ranks_pairs: bool = False
    """The pairwise accuracy after training must be above chance (reward models)."""
    reward_rises: bool = False
    """The sampled reward must rise by more than its noise (online methods)."""


_NOT_INITIAL = "the reference is not the initial policy"


@dataclass(frozen=True)
class MethodSpec:
    name: Method
    trainer: str
    """The trainer class's import path, as the matrix shows it."""
    reference: bool
    """The loss compares the policy with a reference (DPO, KTO); reference-free methods have no init mode that
    places one."""
    trainer_module: str
    """The worker module that builds the trainer: bench.worker.trainers.<trainer_module>."""
    experimental: bool = False
    """The trainer lives in trl.experimental."""
    data: DataForm = "pairs"
    output: Output = "fused_logprobs"
    logits_units: float = 0.0
    """For a `full_logits` output (0 for the others): [R, L, V] logits-sized tensors alive at the peak of the loss's
    backward (the estimator's full_logits term), counted at the entry on the autograd graph of TRL's experimental
    orpo and cpo trainers (concatenated_forward, get_batch_logps) with torch's log-softmax (`selective_log_softmax`
    without Triton).
    First-pass RSS of the same code on the CPU (`python -m bench selfbench head-tiles`) rose by 6.1-7.1 (ORPO) and
    5.1-6.4 (SimPO) units, allocator overhead included. With Triton (GPU) the log-softmax's backward builds one
    gradient instead of two: an upper bound there."""
    learning: LearningRule = field(default_factory=LearningRule)
    """The learning check's rule for the method (bench/judge/learning.py)."""
    mfu_kind: Literal["sft", "dpo"] = "sft"
    """Which published MFU figures' kind bounds its predicted speed (scenarios/published/mfu.yaml): `dpo`, or
    `sft` for a step of one policy pass per sequence like pretraining's."""
    extra_forwards: int = 0
    """Forward passes per step without gradient beyond the reference's (KTO: the policy's forward over the KL
    batch), each over as many tokens as the training batch."""
    reference_forwards: int = 1
    """The reference's forward passes per step when it is not precomputed (KTO: the batch and the KL batch)."""
    learning_rate_scale: float = 1.0
    """Factor on the workload's learning rate. Not 1 only where the method's loss moves too little at the
    workload's rate for its learning check to see it (measured, with the reason, at the entry)."""
    generates: bool = False
    """Online RL (GRPO, RLOO): each step samples the workload's `generation.num_generations` completions per prompt
    from the policy, scores them with a reward (bench/worker/rewards.py) and trains on them; the reference is a
    KL term (TRL's `beta`), not a log-ratio of given answers, so it cannot be precomputed. The sampling's forwards
    (a prefill and one decoding step per token) are not among `extra_forwards`: MFU counts the training step's."""
    disables_dropout: bool = True
    """Its TRL config's `disable_dropout` default: True sets every nn.Dropout module's p to 0 (trl/trainer/utils.py
    `disable_dropout_in_model`); SFTConfig has no such field, GRPOConfig and RLOOConfig default to False."""
    qlora_cast: QloraCast = "always"
    trl_script: str | None = None
    """TRL's own training script for the method (`trl <method>` runs it), where TRL ships one: what an exported
    recipe runs unless the cell needs what it cannot build (bench/advise/launch_files.py)."""

    def __post_init__(self) -> None:
        if (self.output == "full_logits") != (self.logits_units > 0):
            raise ValueError(f"{self.name}: a full_logits output, and only it, states its logits_units")

    def no_grad_forwards(self, precomputed_ref: bool) -> int:
        """Forward passes per step without gradient: the extra ones and the reference's unless precomputed."""
        return self.extra_forwards + (0 if precomputed_ref else self.reference_forwards)

    def bf16_adapters(self, quantized: bool, quant: str, precision: str) -> bool:
        """A quantized model's adapters are trained in bf16 (else fp32, PEFT's default). Pure."""
        return quantized and (self.qlora_cast == "always" or (quant == "nf4" and precision == "bf16"))

    def dropout_active(self, p: float, module: bool = True) -> bool:
        """A dropout of probability `p` drops in this method's training: p > 0 and, for an nn.Dropout module (PEFT's
        lora_dropout is one), a trainer that does not disable dropout. Pure."""
        return p > 0 and not (module and self.disables_dropout)

    @property
    def title(self) -> str:
        """The method as people write it, in headings."""
        return TITLES.get(self.name, self.name.upper())

    @property
    def rows_per_example(self) -> int:
        """Sequences one example puts through the policy per step: chosen and rejected for pairs, else one."""
        return 2 if self.data == "pairs" else 1

    @property
    def config(self) -> str:
        """The import path of the trainer's config class (TRL names it after the trainer)."""
        return self.trainer.removesuffix("Trainer") + "Config"

    @property
    def trainer_class(self) -> str:
        """The trainer's class name, as engagement sees it."""
        return self.trainer.rsplit(".", 1)[-1]


TITLES = {Method.REWARD: "reward-model", Method.SIMPO: "SimPO"}
"""Where a method is not written as its id in capitals."""

METHODS: dict[Method, MethodSpec] = {
    spec.name: spec
    for spec in (
        MethodSpec(
            Method.DPO,
            trainer="trl.DPOTrainer",
            reference=True,
            trainer_module="dpo",
            trl_script="trl.scripts.dpo",
            learning=LearningRule(LN2, _NOT_INITIAL),
            mfu_kind="dpo",
        ),
        MethodSpec(
            Method.SFT,
            trainer="trl.SFTTrainer",
            reference=False,
            trainer_module="sft",
            data="completions",
            reference_forwards=0,
            trl_script="trl.scripts.sft",
            disables_dropout=False,
        ),
        MethodSpec(
            Method.REWARD,
            trainer="trl.RewardTrainer",
            reference=False,
            trainer_module="reward",
            output="scalar",
            reference_forwards=0,
            trl_script="trl.scripts.reward",
            learning=LearningRule(LN2, "the reward head did not start at zero", falls=False, ranks_pairs=True),
        ),
        MethodSpec(
            Method.KTO,
            trainer="trl.KTOTrainer",
            reference=True,
            trainer_module="kto",
            data="unpaired",
            extra_forwards=1,
            reference_forwards=2,
            trl_script="trl.scripts.kto",
            learning=LearningRule(0.5, _NOT_INITIAL),
        ),
        MethodSpec(
            Method.ORPO,
            trainer="trl.experimental.orpo.ORPOTrainer",
            reference=False,
            trainer_module="orpo",
            experimental=True,
            qlora_cast="nf4_bf16",
            output="full_logits",
            # the logits (1, kept to the end); in the backward the gather's zero-filled gradient (1), the per-row
            # logsumexp gradients stacked (1) and their sum (1); the NLL on the chosen half adds a gradient that
            # waits, full-size after the `[:half]` slice's backward, to be summed into the logits' (1); its
            # log-softmax output (0.5) is freed before the peak
            logits_units=5.0,
            reference_forwards=0,
        ),
        MethodSpec(
            Method.SIMPO,
            trainer="trl.experimental.cpo.CPOTrainer",
            reference=False,
            trainer_module="simpo",
            experimental=True,
            qlora_cast="nf4_bf16",
            output="full_logits",
            logits_units=4.0,  # ORPO's count without the NLL: SimPO (cpo_alpha=0) computes none
            reference_forwards=0,
            # SimPO's margin is the difference of length-normalised log-probs (a per-token mean, DPO's is a sum
            # over ~30-60 tokens): at the tiny workload's LoRA rate (2e-3, beta 2) its mean loss over the last
            # quarter fell 0.026 below the first quarter's, under the learning check's 0.03; at 2.5x it fell 0.094
            # (measured on tiny, one_adapter-none-single).
            learning_rate_scale=2.5,
        ),
        *(
            MethodSpec(
                method,
                trainer=f"trl.{name}Trainer",
                reference=True,
                trainer_module="online",
                data="prompts",
                generates=True,
                learning=LearningRule(falls=False, reward_rises=True),
                disables_dropout=False,
            )
            for method, name in ((Method.GRPO, "GRPO"), (Method.RLOO, "RLOO"))
        ),
    )
}


def method_spec(method: Method | str) -> MethodSpec:
    return METHODS[method]  # a Method is its string: either key finds the entry
