"""GRPO and RLOO: TRL's online trainers (trl.GRPOTrainer, trl.RLOOTrainer take the same arguments). Each step
samples `generation.num_generations` completions per prompt from the policy through transformers' generate (or
vLLM with the `vllm` option), scores them with the rule-based reward (bench/worker/rewards.py), and, with the
`reward_model` option, also with a sequence-classification reward model: in a matrix cell built from the workload's
checkpoint as the reward method's module builds it (its head starts at zero, so it adds memory and a forward pass, not
reward); in the rlhf pipeline the reward model its reward stage trained (WorkerSpec.reward_model).

The reference is TRL's KL term at the workload's beta (TRL's GRPO default, 0, would build none): the adapter
disabled (one_adapter), the frozen `ref` adapter TRL copies (two_adapters), or, for two_models, a second model TRL
loads itself from the checkpoint's path (the trainers take no `ref_model`)."""

from typing import Any

from bench.matrix.axes import Option
from bench.matrix.inits import init_spec
from bench.matrix.methods import method_spec
from bench.matrix.on_profile import CellOnProfile
from bench.matrix.online_rules import steps_per_generation
from bench.matrix.recipes import verify_installed
from bench.worker.models import build_models, load_causal_lm, load_pretrained
from bench.worker.rewards import target_token_share
from bench.worker.spec import WorkerSpec
from bench.worker.trainer_args import common_arguments
from bench.worker.trainers import inputs
from bench.worker.trainers.reward import MODEL_CLASS, MODEL_KWARGS, load_reward_model


def online_arguments(spec: WorkerSpec) -> dict[str, Any]:
    """GRPOConfig's and RLOOConfig's keyword arguments for the cell. Their prompts and completions have lengths of
    their own (no `max_length`)."""
    generation = spec.workload.generation
    common = {k: v for k, v in common_arguments(spec).items() if k != "max_length"}
    return (
        common
        | {
            "learning_rate": common["learning_rate"] * generation.learning_rate_scale,
            "temperature": generation.temperature,
            "beta": spec.workload.train.beta,
            "num_generations": generation.num_generations,
            "max_completion_length": generation.max_completion_length,
            "steps_per_generation": steps_per_generation(
                spec.workload.train.per_device_train_batch_size,
                CellOnProfile(spec.cell, spec.profile).world,
                generation.num_generations,
                spec.workload.train.gradient_accumulation_steps or 1,
            ),
            "use_vllm": Option.VLLM in spec.cell.options,
            "reward_weights": [1.0, generation.reward_model_weight][: 1 + (Option.REWARD_MODEL in spec.cell.options)],
            "vllm_mode": "colocate",
        }
        | _vllm_share(generation.vllm_gpu_memory_utilization)
    )


def _vllm_share(share: float | None) -> dict[str, float]:
    """`--vllm-gpu-memory-utilization` where given; else TRL's default share."""
    return {} if share is None else {"vllm_gpu_memory_utilization": share}


def policy(spec: WorkerSpec) -> tuple[Any, Any]:
    """(model, peft_config) the trainer is given: the checkpoint alone where TRL builds the reference itself."""
    if init_spec(spec.cell.init).reference == "separate_model":
        verify_installed(spec.recipe)
        return load_causal_lm(spec), None
    built = build_models(spec)
    return built.model, built.peft_config


def scoring_model(spec: WorkerSpec) -> Any:
    """The `reward_model` option's model: the trained one a pipeline hands on, else a zero-head one."""
    if spec.reward_model is None:
        return load_reward_model(spec)
    return load_pretrained(spec, MODEL_CLASS, path=spec.reward_model, **MODEL_KWARGS)


def trainer(spec: WorkerSpec, callbacks: list[Any]) -> Any:
    import trl

    name = method_spec(spec.cell.method).trainer_class
    config_class, trainer_class = getattr(trl, name.replace("Trainer", "Config")), getattr(trl, name)
    tokenizer, dataset = inputs(spec)
    model, peft_config = policy(spec)
    reward_funcs: list[Any] = [target_token_share]
    if Option.REWARD_MODEL in spec.cell.options:
        reward_funcs.append(scoring_model(spec))
    return trainer_class(
        model=model,
        reward_funcs=reward_funcs,
        args=config_class(**online_arguments(spec)),
        train_dataset=dataset,
        processing_class=tokenizer,
        reward_processing_classes=[None, tokenizer][: len(reward_funcs)],
        peft_config=peft_config,
        callbacks=callbacks,
    )
