"""One point of the decision page: what `advise` ranks for a question, and the flags its commands carry."""

import shlex

from bench.advise.advice import advise
from bench.advise.host import host_memory, host_need, verdict
from bench.advise.question import Question, predicted
from bench.matrix.cell import Cell
from bench.matrix.methods import method_spec
from bench.matrix.profiles import HardwareProfile, Workload
from bench.matrix.scenario import parse_methods
from bench.report.decide_data import PageGeneration, PointResult


def advise_point(question: Question, matrix: list[Cell]) -> tuple[HardwareProfile, PointResult]:
    """`advise`'s own prediction of the point `question` asks, over the expanded `matrix`."""
    profile, workload, by_id, predictions = predicted(question, matrix)
    usable = next((p.usable_bytes for p in predictions if p.usable_bytes is not None), None)
    host = host_memory(profile, question.host_ram)
    predicted_ = [p for p in predictions if p.status == "predicted"]
    host_oom = frozenset(p.cell_id for p in predicted_ if verdict(p, profile, host) == "host_oom")
    # The picks and the speeds are advise's own, over the fitting cells: the others' fixes are not on the page.
    fitting = [p for p in predicted_ if p.verdict == "fits" and p.cell_id not in host_oom]
    advice = advise(profile, workload, fitting, by_id, question.prefer, host)
    speeds = {i: c.tokens_per_s for c in advice.cells for i in (c.cell_id, *c.alternatives)}
    mfus = {i: c.mfu for c in advice.cells for i in (c.cell_id, *c.alternatives)}
    picks = tuple((p.kind, p.cell_id, p.reason) for p in advice.picks)
    flags = shlex.join(question.target.flags())
    need = {p.cell_id: host_need(p, profile) for p in predicted_ if p.host_bytes}
    memory = None if host is None else host.bytes_per_node
    generation = generation_of(question, workload)
    return profile, PointResult(
        flags, usable, predictions, by_id, host_oom, speeds, mfus, picks, need, memory, generation, profile.peak_tflops
    )


def generation_of(question: Question, workload: Workload) -> PageGeneration | None:
    """The workload's sampling settings where the question's method generates (GRPO, RLOO); None elsewhere."""
    if not any(method_spec(m).generates for m in parse_methods(question.method)):
        return None
    g = workload.generation
    return PageGeneration(g.num_generations, g.max_completion_length, g.prompt_length)
