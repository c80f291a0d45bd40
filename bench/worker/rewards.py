"""The online methods' rule-based reward (GRPO, RLOO): a function of the sampled token ids, so no model scores the
completions and a tiny random policy can raise it within a CPU cell's steps. Pure.

The reward of a completion is the share of its tokens whose id is even: a fixed half of any vocabulary, known
without a tokenizer. A policy that samples at random scores 1/2 on average; raising it means shifting the output
distribution towards the target ids, which every init mode can do (LoRA on attention moves the residual stream
that the LM head reads). An empty completion scores 0."""

from collections.abc import Sequence
from typing import Any


def is_target(token_id: int) -> bool:
    return token_id % 2 == 0


def target_token_share(completion_ids: Sequence[Sequence[int]], **_: Any) -> list[float]:
    """One reward per completion, in TRL's reward-function form (it passes prompts, completions and more by
    keyword: only the sampled ids are read)."""
    return [sum(is_target(t) for t in ids) / len(ids) if len(ids) else 0.0 for ids in completion_ids]


REWARD_METRIC = "reward"
"""What GRPOTrainer and RLOOTrainer log as a generation's mean total reward over every rank's completions: each
reward function's score, weighted (1 each), summed. With the rule alone, or with a reward model whose head is zero,
it is the rule's; with a trained reward model (the rlhf pipeline's), the sum the policy is trained to raise."""
PART_PREFIX, PART_SUFFIX = "rewards/", "/mean"
"""Each reward function's own mean is logged as rewards/<name>/mean (the rule: target_token_share; a reward model:
its checkpoint folder's name)."""
