"""One DPO cell as a plain TRL script, without the suite: the baseline of bench/overhead.py.

Same prepared model, tokenizer and dataset, the same DPOConfig values as bench/worker/build.py for a
single-process, unquantized cell; its own minimal timing: wall clock and TRL's cumulative num_tokens between the
end of the warm-up steps and the end of training (the suite's tokens_per_s definition).

    python -m bench.plain_dpo [--cell one_adapter-none-single] [--hw cpu]   # prints one JSON line
"""

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from typing import Any

import torch
from transformers import TrainerCallback

from bench.paths import SCENARIOS_DIR

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class SteadyClock(TrainerCallback):
    """Step-end times; TRL's token count at the end of step warmup+1 and of the last step."""

    def __init__(self, warmup_steps: int) -> None:
        self.warmup_steps = warmup_steps
        self.trainer: Any = None
        self.ends: list[float] = []
        self.marks: list[tuple[float, int]] = []

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
        self.ends.append(time.perf_counter())
        if state.global_step == self.warmup_steps + 1 or state.global_step == state.max_steps:
            self.marks.append((self.ends[-1], int(self.trainer._total_train_tokens)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.plain_dpo", description=__doc__.splitlines()[0])
    parser.add_argument("--cell", default="one_adapter-none-single", help="<init>-none-single")
    parser.add_argument("--hw", default="cpu")
    parser.add_argument("--workload", default=None)
    args = parser.parse_args(argv)
    init, quant, backend = args.cell.split("-")
    if quant != "none" or backend != "single":
        parser.error("the plain script runs unquantized single-process cells only")

    from datasets import load_from_disk
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    from bench.assets import prepare
    from bench.profiles import load_profile, load_workload

    profile = load_profile(args.hw, SCENARIOS_DIR)
    workload = load_workload(args.workload or profile.workload, SCENARIOS_DIR)
    assets = prepare(workload)
    torch.set_num_threads(profile.threads_per_process)
    train, lora = workload.train, workload.lora

    def load() -> Any:
        return AutoModelForCausalLM.from_pretrained(assets.model, dtype=DTYPES[profile.precision])

    peft_config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        task_type="CAUSAL_LM",
    )
    model, ref_model, trainer_peft = load(), None, None
    if init == "two_models":
        ref_model = load()
    elif init == "one_adapter":
        trainer_peft = peft_config
    else:
        model = get_peft_model(model, peft_config)

    config = DPOConfig(
        output_dir=f"/tmp/plain_dpo-{os.getpid()}",
        max_steps=train.steps,
        per_device_train_batch_size=train.per_device_train_batch_size,
        learning_rate=train.learning_rate,
        beta=train.beta,
        max_length=train.max_length,
        seed=train.seed,
        gradient_checkpointing=train.gradient_checkpointing,
        bf16=profile.precision == "bf16",
        fp16=profile.precision == "fp16",
        use_cpu=profile.device == "cpu",
        logging_steps=train.steps,
        save_strategy="no",
        report_to="none",
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    clock = SteadyClock(train.warmup_steps)
    trainer = DPOTrainer(
        model=model,
        ref_model=ref_model,
        args=config,
        train_dataset=load_from_disk(assets.dataset),
        processing_class=AutoTokenizer.from_pretrained(assets.tokenizer),
        peft_config=trainer_peft,
        callbacks=[clock],
    )
    clock.trainer = trainer
    trainer.train()
    (start, start_tokens), (end, end_tokens) = clock.marks
    logged = [entry["num_tokens"] for entry in trainer.state.log_history if "num_tokens" in entry]
    steady = clock.ends[train.warmup_steps :]
    result = {
        "cell": args.cell,
        "tokens_per_s": (end_tokens - start_tokens) / (end - start),
        "step_time_median_s": statistics.median([b - a for a, b in itertools.pairwise(steady)]),
        "steady_steps": train.steps - train.warmup_steps - 1,
        "tokens_total": end_tokens,
        "logged_num_tokens": logged[-1] if logged else None,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
