"""One module per training method (bench/matrix/methods.py names it): each builds its TRL trainer for a cell with
`trainer(spec, callbacks)` from its config's keyword arguments `arguments(spec)` (what an exported recipe writes
too), and may measure what its learning check needs after training with `evaluate(spec, trainer) -> Evaluation`
(the reward model's pairwise accuracy). A method whose model is not a causal LM names its Auto class, that class's
extra keywords and its LoRA task type (MODEL_CLASS, MODEL_KWARGS, LORA_TASK)."""

import importlib
from types import ModuleType
from typing import Any

from bench.matrix.methods import method_spec
from bench.worker.spec import WorkerSpec


def trainer_module(method: str) -> ModuleType:
    return importlib.import_module(f"{__name__}.{method_spec(method).trainer_module}")


def model_class(method: str) -> tuple[str, dict[str, Any], str]:
    """(transformers Auto class, its extra from_pretrained keywords, LoRA task type) of the method's model."""
    module = trainer_module(method)
    return (
        getattr(module, "MODEL_CLASS", "AutoModelForCausalLM"),
        dict(getattr(module, "MODEL_KWARGS", {})),
        getattr(module, "LORA_TASK", "CAUSAL_LM"),
    )


def inputs(spec: WorkerSpec) -> tuple[Any, Any]:
    """(tokenizer, training rows) of the cell: its dataset folder holds the rows of its method's form."""
    from datasets import load_from_disk
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(spec.assets.tokenizer), load_from_disk(spec.assets.dataset)


def assemble(
    trainer_class: Any, args: Any, built: Any, tokenizer: Any, dataset: Any, callbacks: list[Any], reference: bool
) -> Any:
    """`trainer_class` over what the cell built: TRL's trainers take the same keywords. `reference`: the trainer
    takes the reference model the init mode built (DPO, KTO); the reference-free ones take no `ref_model`."""
    extra = {"ref_model": built.ref_model} if reference else {}
    return trainer_class(
        model=built.model,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=built.peft_config,
        callbacks=callbacks,
        **extra,
    )
