"""The advice as Markdown, JSON or CSV. Every figure is labelled PREDICTED."""

import csv
import io

from bench.advise.advice import Advice, CellAdvice
from bench.advise.picks import Pick, no_fastest, shown_tokens
from bench.matrix.axes import Method
from bench.matrix.methods import method_spec
from bench.units import GB, bytes_text

CHECK_LABEL = "a check of this setup on random weights and synthetic data (a few steps), not training your model"
"""What the printed `python -m bench run ... --filter CELL` line is (what trains a model: `advise --export`)."""
RANKED_BY = {
    "fastest": "the most PREDICTED tokens/s first",
    "fewest-gpus": "the fewest GPUs first, then the fastest",
    "faithful": "the most faithful first (full fine-tuning, LoRA on the training precision's weights, on 8-bit, on "
    "4-bit), then the fastest",
}


def _gb(value: float | None) -> str:
    return bytes_text(value, "GB", 1)


def _range(entry: CellAdvice) -> str:
    if entry.range_low_bytes is None or entry.range_high_bytes is None:
        return ""
    return f" ({entry.range_low_bytes / GB:,.1f}–{entry.range_high_bytes / GB:,.1f})"


def _speed(tokens_per_s: float | None, mfu: float | None = None) -> str:
    """PREDICTED tokens/s with the MFU it implies beside it, so a figure no run reaches shows as one."""
    if tokens_per_s is None:
        return "—"
    return f"{shown_tokens(tokens_per_s):,}" + ("" if mfu is None else f" · MFU {mfu:.0%}")


def _fix(entry: CellAdvice) -> str:
    if entry.verdict == "fits":
        return ""
    if entry.fix is None:
        return "no single change found"
    flags = f" (`{' '.join(entry.fix.flags)}`)" if entry.fix.flags else ""
    into = f" → `{entry.fix.cell_id}`" if entry.fix.cell_id != entry.cell_id else ""
    return f"{entry.fix.change}{flags}{into}: {_gb(entry.fix.total_bytes)}, margin {_gb(entry.fix.margin_bytes)}"


HOST_UNCHECKED = "host unchecked"
"""The mark of an offload cell whose host need is held against no host memory figure."""


def _host(advice: Advice, entry: CellAdvice) -> str:
    """Per rank, and for an offload cell the need of a node against the node's host memory."""
    if not entry.host_bytes:
        return "—"
    per_rank = f"{_gb(entry.host_bytes)}/rank"
    if advice.host_memory_bytes is None:
        return f"{per_rank}, {_gb(entry.host_need_bytes)} per node, {HOST_UNCHECKED}"
    need = f"{_gb(entry.host_need_bytes)} of {_gb(advice.host_memory_bytes)} per node"
    over = entry.host_need_bytes > advice.host_memory_bytes
    return f"{per_rank}, **{need}**" if over else f"{per_rank}, {need}"


def _card_lines(advice: Advice) -> list[str]:
    """What the answer is worth on this card: a custom card's unknown speed, a card this suite cannot run on."""
    from bench.advise.target import CUSTOM_PREFIX
    from bench.matrix.gpus import gpu

    if advice.gpu is None and advice.hardware.startswith(CUSTOM_PREFIX):
        line = (
            "custom card (not in scenarios/gpus.yaml): its memory is --gpu-memory's, its speed unknown, so no "
            "tokens/s is PREDICTED."
        )
    elif advice.gpu is not None and not gpu(advice.gpu).runnable:
        line = (
            f"{advice.gpu}: this suite cannot run on it (scenarios/gpus.yaml `runnable: false`; AMD ROCm): the "
            "estimate is for planning only, and the `dpo-bench run` command below is not for this card."
        )
    else:
        return []
    return [line, ""]


def _generation_line(advice: Advice) -> list[str]:
    """The online methods' generation settings (G, P, C, who generates), where one is advised."""
    g = advice.generation
    if g is None:
        return []
    if g.vllm is None:
        who = "transformers' generate, vLLM colocated on the `+vllm` rows (--vllm to choose)"
    elif g.vllm == "none":
        who = "transformers' generate (--vllm none)"
    else:
        share = g.vllm_gpu_memory_utilization or 0
        who = f"vLLM {g.vllm} at {share:g} of each vLLM card (--vllm-gpu-memory-utilization)"
    return [
        f"generation (grpo, rloo): G {g.num_generations} completions per prompt, prompt P {g.prompt_length} tokens, "
        f"completion C {g.completion_length} tokens; {who}.",
        "",
    ]


def _host_line(advice: Advice) -> list[str]:
    if advice.host_memory_bytes is None:
        if not any(c.host_unchecked for c in advice.cells):
            return []
        return [
            f"host memory: no figure for a node carrying {advice.gpu or advice.hardware} (--host-ram GB checks it): "
            f"each offload cell shows its host need per node, marked {HOST_UNCHECKED}; its verdict is the device's.",
            "",
        ]
    return [
        f"host memory {advice.host_memory_bytes / GB:,.0f} GB per node ({advice.host_memory_origin}): each offload "
        "cell's host need, its host memory per rank times its ranks on a node, is held against it (host OOM when "
        "over).",
        "",
    ]


VERDICT_LABELS = {
    "fits": "fits",
    "likely_fits": "likely fits",
    "likely_oom": "likely OOM",
    "oom": "OOM",
    "host_oom": "host OOM",
}


def _verdict(entry: CellAdvice) -> str:
    """`likely OOM (P(fit) 31 %)`, and `*` where its interval came from a wider pool than comparable cells."""
    label = VERDICT_LABELS.get(entry.verdict, entry.verdict)
    if entry.fit_probability is None or entry.verdict == "host_oom":
        return label
    wider = "*" if entry.wider_pool else ""
    return f"{label} (P(fit) {entry.fit_probability:.0%}){wider}"


HOST_NOTE = (
    "Host need per node = the offloaded state per rank (the estimator's host_bytes) x the ranks on the node; not "
    "counted: the model's load on the host before sharding (a whole copy per rank without accelerate's "
    "cpu_ram_efficient_loading), the libraries' own resident memory and the operating system's."
)


def _methods(advice: Advice) -> str:
    """The advised cells' methods, as headings write them (DPO, SFT and KTO)."""
    asked = {c.method for c in advice.cells}
    titles = [method_spec(m).title for m in Method if m in asked] or ["no"]
    return titles[0] if len(titles) == 1 else ", ".join(titles[:-1]) + " and " + titles[-1]


def to_markdown(advice: Advice, limit: int | None = None) -> str:
    a = advice
    memory = _gb(a.memory_per_device_bytes)
    where = f"{a.devices_per_node} x {a.gpu or a.hardware}" + (f" x {a.nodes} nodes" if a.nodes > 1 else "")
    fitting = sum(c.verdict == "fits" for c in a.cells)
    variants = sum(len(c.alternatives) for c in a.cells)
    folded = f"; {variants} launcher variants with the same prediction folded into their rows" if variants else ""
    lines = [
        f"# PREDICTED: {_methods(a)} setups for `{a.model}` on {where} ({memory} each, {a.precision})",
        "",
        f"**PREDICTED, not measured** (estimator {a.estimator_version}, docs/estimator.md). max length {a.max_length}, "
        f"batch {a.batch_size} per device, accumulation {a.grad_accum or 1}, LoRA r{a.lora_r} on "
        f"{', '.join(a.lora_targets)}, gradient checkpointing {'on' if a.gradient_checkpointing else 'off'}, "
        f"optim {a.optim or 'library default'}, precompute ref {'on' if a.precompute_ref else 'off'}"
        + "".join(f", {said}" for said in a.settings)
        + ".",
        "",
        *_generation_line(a),
        *_card_lines(a),
        *_host_line(a),
        f"{fitting} of {len(a.cells)} applicable cells fit ({a.not_applicable} not applicable on this "
        f"hardware{folded}). "
        f"Ranked: fitting cells first, {RANKED_BY[a.prefer]} (--prefer); likely_fits, then likely_oom next; for each "
        "cell that does not fit, the smallest change predicted to make it fit. P(fit): the share of comparable "
        "measurements' errors (docs/estimator.md) under which the device holds the cell; the range is their 80 % "
        "interval; `*`: too few comparable rows, a wider pool's (`--format json` names it).",
        "",
        *_picks(a),
        "| rank | cell | setup | devices | PREDICTED verdict | PREDICTED total (range) | margin | host "
        "| PREDICTED tokens/s | smallest fix |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    shown = a.cells if limit is None else a.cells[:limit]
    for c in shown:
        setup = c.setup + (f" ({', '.join(c.recipes)})" if c.recipes else "")
        cell = c.cell_id + (f" (same: {', '.join(c.alternatives)})" if c.alternatives else "")
        verdict = _verdict(c)
        host = _host(a, c)
        lines.append(
            f"| {c.rank} | {cell} | {setup} | {c.devices} | {verdict} | {_gb(c.total_bytes)}{_range(c)} "
            f"| {_gb(c.margin_bytes)} | {host} | {_speed(c.tokens_per_s, c.mfu)} | {_fix(c)} |"
        )
    if limit is not None and len(a.cells) > limit:
        lines.append(f"| … | {len(a.cells) - limit} more (--top 0 shows every cell) | | | | | | | | |")
    notes = sorted({n for c in a.cells for n in c.notes})
    if any(c.host_bytes for c in shown):
        notes.append(HOST_NOTE)
    if notes:
        lines += ["", *[f"- {n}" for n in notes]]
    lines += ["", "## To run it", "", *_to_run(a)]
    return "\n".join(lines) + "\n"


def _pick(pick: Pick) -> str:
    also = f" (or {', '.join(f'`{i}`' for i in pick.alternatives)}: the same prediction)" if pick.alternatives else ""
    return f"- **{pick.kind}** ({method_spec(pick.method).title}): `{pick.cell_id}`{also}, {pick.reason}"


def _picks(advice: Advice) -> list[str]:
    """The picks, within each method; a method none of whose fitting setups has a speed says it has no fastest."""
    lines = [_pick(p) for p in advice.picks]
    lines += [
        f"- no **fastest** pick for {title}: none of its fitting setups has a PREDICTED speed; its picks are by GPUs "
        "and by faithfulness"
        for title in no_fastest(advice.cells)
    ]
    return [*lines, ""] if lines else []


def _nothing_to_run(advice: Advice) -> str:
    """Why nothing is to run, true for the hardware asked about."""
    if advice.memory_per_device_bytes is None:
        return (
            f"No verdict: `{advice.hardware}` states no memory per device to hold the cells against (a CPU's is the "
            "host's RAM), so nothing is chosen; the PREDICTED totals above are each cell's need per process."
        )
    return "Nothing is predicted to fit, not even with one change: more or bigger GPUs (`--gpu NAME:COUNT`)."


def _to_run(advice: Advice) -> list[str]:
    """The "To run it" section: the command, the native files, or why nothing is to run."""
    run = advice.run
    if run is None:
        return [_nothing_to_run(advice)]
    lines = []
    if run.change:
        lines += [f"No cell fits as it is; `{run.cell_id}` is predicted to fit with: {run.change}.", ""]
    lines += [
        f"`dpo-bench run` below is {CHECK_LABEL}. `--export DIR` writes the launch files that train your model in this "
        "setup (launch line, accelerate/DeepSpeed config, TRL's DPO settings; docs/advise.md).",
        "",
        "```",
        run.command,
        "```",
    ]
    for name, text in run.files.items():
        lines += ["", f"`{name}` (what `run` writes for the cell):", "", "```", text.rstrip("\n"), "```"]
    for name, why in run.not_shown.items():
        lines += ["", f"`{name}` (what `run` writes for the cell): not shown here: {why}."]
    return lines


def to_json(advice: Advice) -> str:
    return advice.model_dump_json(indent=2) + "\n"


COLUMNS = (
    "predicted",
    "rank",
    "cell_id",
    "alternatives",
    "method",
    "init",
    "quant",
    "backend",
    "setup",
    "devices",
    "verdict",
    "fit_probability",
    "total_bytes",
    "range_low_bytes",
    "range_high_bytes",
    "tokens_per_s",
    "train_bytes",
    "load_bytes",
    "host_bytes",
    "host_need_bytes",
    "host_unchecked",
    "usable_bytes",
    "margin_bytes",
    "fix_change",
    "fix_flags",
    "fix_cell_id",
    "fix_total_bytes",
    "fix_margin_bytes",
)


def to_csv(advice: Advice) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(COLUMNS)
    for c in advice.cells:
        fix = c.fix
        writer.writerow(
            [
                "PREDICTED",
                c.rank,
                c.cell_id,
                " ".join(c.alternatives),
                c.method,
                c.init,
                c.quant,
                c.backend,
                c.setup,
                c.devices,
                c.verdict,
                "" if c.fit_probability is None else f"{c.fit_probability:.3f}",
                f"{c.total_bytes:.0f}",
                "" if c.range_low_bytes is None else f"{c.range_low_bytes:.0f}",
                "" if c.range_high_bytes is None else f"{c.range_high_bytes:.0f}",
                "" if c.tokens_per_s is None else f"{c.tokens_per_s:.0f}",
                f"{c.train_bytes:.0f}",
                f"{c.load_bytes:.0f}",
                f"{c.host_bytes:.0f}",
                f"{c.host_need_bytes:.0f}",
                "host unchecked" if c.host_unchecked else "",
                "" if c.usable_bytes is None else f"{c.usable_bytes:.0f}",
                "" if c.margin_bytes is None else f"{c.margin_bytes:.0f}",
                fix.change if fix else "",
                " ".join(fix.flags) if fix else "",
                fix.cell_id if fix else "",
                f"{fix.total_bytes:.0f}" if fix else "",
                f"{fix.margin_bytes:.0f}" if fix else "",
            ]
        )
    return buf.getvalue()
