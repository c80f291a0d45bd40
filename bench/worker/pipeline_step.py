"""The pipeline's steps that do not train, each a process of its own: `python -m bench.worker.pipeline_step
SPEC.json` (bench/pipeline runs them).

- merge: the base checkpoint plus a trained LoRA adapter (a causal LM's, or a reward model's with its score head),
  merged with PEFT's `merge_and_unload` and saved with the tokenizer. Checked: the adapter changes the base model's
  logits on a fixed prompt, and the merged model's logits equal the adapter model's within the precision's tolerance.
- generate: the merged model loaded with plain transformers (no PEFT), then greedy generation of exactly
  `new_tokens` tokens after a fixed prompt (EOS held back). Checked: the number of new tokens.

Each writes its report (peak memory, checks, or its error) as one JSON file, atomically."""

import os
import sys
import traceback
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from bench.files import write_whole
from bench.secrets import redact

MERGE_TOLERANCE = {"fp32": 1e-3, "bf16": 0.125, "fp16": 0.0625}
"""max |logit| difference allowed between the adapter model and its merge. Merging adds B·A into W once instead of
at every forward; in fp32 that changes rounding only (~1e-6 relative); in bf16/fp16 the merged weight itself is
rounded to 8/11 mantissa bits, a relative 2^-8 / 2^-11 of logits a few units large."""


class StepSpec(BaseModel):
    step: Literal["merge", "generate"]
    model: str
    """The base checkpoint (merge) or the merged model (generate)."""
    tokenizer: str
    report: str
    """The JSON file this step writes its StepReport to."""
    precision: str
    device: str
    prompt: str
    adapter: str | None = None
    task: Literal["causal_lm", "sequence_classification"] = "causal_lm"
    """merge: what the adapter was trained on: a causal LM, or a reward model's one-output head (bench/worker/stages/
    reward.py), whose trained head the merged model keeps."""
    output: str | None = None
    """merge: the folder the merged model is saved to."""
    new_tokens: int = 0


class StepReport(BaseModel):
    pid: int
    peak_bytes: int | None = None
    memory_kind: str = "rss"
    checks: dict[str, float | int | str] = {}
    error: str | None = None
    traceback_tail: str | None = None

    def write(self, path: Path) -> None:
        write_whole(path, self.model_dump_json())


def _dtype(precision: str) -> Any:
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def _device(spec: StepSpec) -> str:
    return "cuda" if spec.device == "cuda" else "cpu"


def merge(spec: StepSpec, checks: dict[str, float | int | str]) -> None:
    import torch
    import transformers
    from peft import PeftModel

    from bench.worker.stages import reward

    assert spec.adapter is not None and spec.output is not None
    tokenizer = transformers.AutoTokenizer.from_pretrained(spec.tokenizer)
    auto_class, kwargs = "AutoModelForCausalLM", {}
    if spec.task == "sequence_classification":
        auto_class, kwargs = reward.MODEL_CLASS, reward.MODEL_KWARGS
    loaded = getattr(transformers, auto_class).from_pretrained(spec.model, dtype=_dtype(spec.precision), **kwargs)
    base = loaded.to(_device(spec))
    model = PeftModel.from_pretrained(base, spec.adapter).eval()
    probe = tokenizer(spec.prompt, return_tensors="pt").to(_device(spec))
    with torch.no_grad():
        adapted = model(**probe).logits.float()
        with model.disable_adapter():
            plain = model(**probe).logits.float()
        merged = model.merge_and_unload()
        after = merged(**probe).logits.float()
    effect = float((adapted - plain).abs().max())
    error = float((after - adapted).abs().max())
    checks |= {"adapter_effect": effect, "merge_error": error, "tolerance": MERGE_TOLERANCE[spec.precision]}
    if effect == 0.0:
        raise RuntimeError("the adapter does not change the base model's logits: it was not trained or not loaded")
    if error > MERGE_TOLERANCE[spec.precision]:
        raise RuntimeError(f"the merged model's logits differ from the adapter model's by {error:.3g}")
    merged.save_pretrained(spec.output)
    tokenizer.save_pretrained(spec.output)


def generate(spec: StepSpec, checks: dict[str, float | int | str]) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(spec.model)
    if (folder / "adapter_config.json").exists():
        raise RuntimeError(f"{folder} holds an adapter, not a merged model")
    tokenizer = AutoTokenizer.from_pretrained(spec.model)
    model = AutoModelForCausalLM.from_pretrained(spec.model, dtype=_dtype(spec.precision)).to(_device(spec)).eval()
    lora = [name for name, _ in model.named_parameters() if "lora_" in name]
    if lora:
        raise RuntimeError(f"the merged model still has LoRA parameters ({lora[0]}, ...)")
    probe = tokenizer(spec.prompt, return_tensors="pt").to(_device(spec))
    with torch.no_grad():
        out = model.generate(
            **probe,
            max_new_tokens=spec.new_tokens,
            min_new_tokens=spec.new_tokens,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
        )
    new = out[0, probe["input_ids"].shape[1] :]
    checks |= {"new_tokens": int(new.shape[0]), "text": tokenizer.decode(new, skip_special_tokens=False)}
    if new.shape[0] != spec.new_tokens:
        raise RuntimeError(f"generated {new.shape[0]} new tokens, asked for {spec.new_tokens}")


STEPS = {"merge": merge, "generate": generate}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m bench.worker.pipeline_step SPEC.json", file=sys.stderr)
        return 2
    spec = StepSpec.model_validate_json(Path(argv[1]).read_text(encoding="utf-8"))
    report = StepReport(pid=os.getpid())
    try:
        STEPS[spec.step](spec, report.checks)
    except BaseException as exc:
        report.error = redact(f"{type(exc).__name__}: {exc}".strip())
        report.traceback_tail = redact("".join(traceback.format_exception(exc))[-4000:])
        raise
    finally:
        from bench.worker import memory

        on_cuda = memory.cuda_used()
        report.memory_kind = "cuda_allocated" if on_cuda else "rss"
        report.peak_bytes = memory.cuda_peaks()[0] if on_cuda else memory.peak_rss_bytes()
        report.write(Path(spec.report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
