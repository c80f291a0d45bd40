"""The real step traced (bench/estimate/trace/): FlopCounterMode's FLOPs against the analytic count, MemTracker's
categories against its peak, the speed model reading a traced entry, and each method's step given the data a run
gives it. Traces tiny's DPO and ORPO steps on the CPU."""

import pytest

from bench.estimate.speed.model import setup_for
from bench.estimate.trace import CellTrace, cache_entry, trace_cell, traceable
from bench.estimate.trace import cache as trace_cache
from bench.matrix.axes import Init, Method, Option
from bench.matrix.cell import Cell
from bench.matrix.plan import plan_for
from bench.matrix.profiles import load_profile, load_workload

pytest.importorskip("trl")

COUNTING = ("cpu", "1xH100")
"""A CPU profile and an accelerator one: the two countings a traced entry's fingerprint names."""


def tiny_plan(*options: Option, init: Init = Init.TWO_MODELS, method: Method = Method.DPO):
    cell = Cell(
        init=init, quant="none", backend="single", launcher="python", options=tuple(sorted(options)), method=method
    )
    return plan_for(cell, load_profile("cpu"), load_workload("tiny"))


@pytest.fixture(scope="module")
def policy_only() -> CellTrace:
    """A step with nothing but the policy's forward and backward: no reference forward (precomputed), no recompute."""
    return trace_cell(tiny_plan(Option.PRECOMPUTE_REF, Option.NO_GRADIENT_CHECKPOINTING))


def test_a_plain_steps_gemms_are_6n_per_token_and_the_heads_recompute(policy_only):
    """Without checkpointing or a reference, the body's GEMMs are exactly 2 forward + 4 backward FLOPs per weight
    per (padded) token: 6N, N without the RMSNorm weights that bench/judge/mfu.py's N includes. TRL's chunked LM head
    runs on the B x (T-1) shifted positions and does 4 GEMMs per token there, not 3: its backward recomputes the
    logits tile before the two gradient GEMMs (trl/kernels/chunked_logprob.py). Exact: the count is integer."""
    s = setup_for(tiny_plan()).step.shape
    rows, length = policy_only.sequences, policy_only.seq_len
    body = s.matmul_params - s.lm_head_params - (2 * s.layers + 1) * s.hidden
    head = 4 * 2 * s.lm_head_params * rows * (length - 1)
    assert policy_only.traced_flops - policy_only.traced_attention_flops == 6 * body * rows * length + head


def test_attention_is_the_analytic_forward_and_the_flash_backward(policy_only):
    """4LHQT per token per forward (QK^T and AV over every key), and torch's count of the fused backward, 2.5 times
    the forward (it recomputes QK^T): 3.5 forwards in all, where work.py counts 3 (2 for the backward)."""
    s = setup_for(tiny_plan()).step.shape
    forward = 4 * s.layers * s.heads * s.head_dim * policy_only.seq_len * policy_only.tokens
    assert policy_only.traced_attention_flops == 3.5 * forward


def test_the_analytic_count_less_what_it_overcounts_is_the_trace(policy_only):
    """The analytic count (work.step_flops) holds every product torch counts: the head's recompute, the flash
    backward's 2.5 forwards. What is left is under 1 %, on its side: it runs the head on T positions where TRL
    shifts to T-1 (4 GEMMs, 8 V h, a position), and counts the RMSNorm weights as GEMM weights (bench/judge/mfu.py's
    N). Nothing else."""
    s = setup_for(tiny_plan()).step.shape
    rows, length = policy_only.sequences, policy_only.seq_len
    head, norms = s.lm_head_params, (2 * s.layers + 1) * s.hidden
    over = 8 * head * rows + 6 * norms * rows * length
    assert policy_only.traced_flops / policy_only.analytic_flops == pytest.approx(0.99, abs=0.01)
    assert policy_only.analytic_flops - over == policy_only.traced_flops


def test_memory_categories_sum_to_the_peak(policy_only):
    memory = policy_only.traced_memory
    assert memory["total"] == sum(v for k, v in memory.items() if k != "total")
    assert memory["params"] > 0 and memory["temp"] > 0


def test_what_cannot_be_traced_says_why():
    assert "bitsandbytes" in traceable(
        plan_for(
            Cell(init="one_adapter", quant="nf4", backend="single", launcher="python"),
            load_profile("cpu"),
            load_workload("tiny"),
        )
    )
    assert traceable(tiny_plan()) is None


def test_the_speed_model_scales_by_a_traced_entry(policy_only, tmp_path, monkeypatch):
    plan = tiny_plan(Option.PRECOMPUTE_REF, Option.NO_GRADIENT_CHECKPOINTING)
    path = tmp_path / "traced_flops.json"
    monkeypatch.setattr(trace_cache, "TRACED_FLOPS", path)
    assert setup_for(plan).flops_scale == 1.0
    entry = cache_entry(plan, policy_only)
    trace_cache.save_traced([entry], path)
    monkeypatch.setattr(
        trace_cache,
        "traced_for",
        lambda p, path=path: trace_cache.load_traced(path).get(
            f"{p.cell.id}|{p.workload.name}|{trace_cache.fingerprint(p)}"
        ),
    )
    from bench.estimate.speed import model

    monkeypatch.setattr(model, "traced_for", trace_cache.traced_for)
    assert model.setup_for(plan).flops_scale == pytest.approx(entry.ratio)
    assert model.setup_for(tiny_plan()).flops_scale == 1.0  # another cell: no entry, the analytic count


def test_every_committed_entry_corrects_the_analytic_count_of_today():
    """An entry's ratio corrects the analytic count it was traced beside: a change to work.py must re-trace (or the
    ratio would correct twice). Each committed entry's analytic FLOPs are the current count for its batch, and the
    trace agrees with it within 10 % (docs/evidence/trace.md: every disagreement beyond is resolved, none is left)."""
    from bench.estimate.trace.flops import analytic_step_flops
    from bench.matrix.scenario import expand, load_matrix

    cells = {cell.id: cell for cell in expand(load_matrix())}
    entries = trace_cache.load_traced().values()
    assert entries
    for entry in entries:
        # an entry traced on a CPU profile or an accelerator one (the fingerprint says which counting)
        plans = [plan_for(cells[entry.cell_id], load_profile(hw), load_workload(entry.workload)) for hw in COUNTING]
        plan = next((p for p in plans if trace_cache.fingerprint(p) == entry.fingerprint), None)
        assert plan is not None, entry.cell_id
        assert analytic_step_flops(plan, entry.sequences, entry.seq_len) == pytest.approx(entry.analytic_flops)
        assert abs(entry.ratio - 1) < 0.10, entry.cell_id


def test_an_orpo_step_runs_chosen_and_rejected_as_one_batch(tmp_path):
    """The experimental ORPO trainer reads (prompt, chosen, rejected) rows, and its collator keeps chosen and
    rejected ids apart; its one forward runs both, padded to the longer (`concatenated_inputs`): the step's shape
    counts the two halves' rows at that length, and the analytic count of that shape is the trace's within 1 %."""
    from bench.estimate.trace.flops import analytic_step_flops, traced_step_flops
    from bench.estimate.trace.step import build_step

    plan = tiny_plan(init=Init.ONE_ADAPTER, method=Method.ORPO)
    step = build_step(plan, tmp_path)
    chosen, rejected = step.batch["chosen_input_ids"].shape, step.batch["rejected_input_ids"].shape
    assert chosen[0] == rejected[0] == plan.workload.train.per_device_train_batch_size
    assert step.shape == (chosen[0] + rejected[0], max(chosen[1], rejected[1]))
    traced = sum(traced_step_flops(step).values())
    assert traced / analytic_step_flops(plan, *step.shape) == pytest.approx(1.0, abs=0.01)
