import pytest

from bench.estimate import generation_terms as g
from bench.matrix.online_rules import steps_per_generation
from bench.matrix.profiles import load_workload


def test_the_kv_cache_of_eight_completions_of_a_7b_llama_by_hand():
    # Llama-2-7B: 32 layers, 32 KV heads of 128 dims, bf16. Per token: 32 x 2 x 32 x 128 x 2 B = 524,288 B.
    # 8 completions of 1,024 tokens after prompts of 2,048: 8 x 3,072 tokens x 524,288 B = 12,884,901,888 B.
    assert g.kv_cache(8, 2048 + 1024, 32, 32, 128, 2) == 8 * 3072 * 524_288 == 12_884_901_888


def test_the_sampling_scores_are_two_fp32_vocabulary_rows_per_completion():
    assert g.sampling_scores(8, 32_000) == 8 * 32_000 * 8


def test_a_rank_generates_whole_groups_at_once():
    assert steps_per_generation(4, 1, 8) == 2  # 4 completions a step, 8 per prompt: one generation serves 2 steps
    assert steps_per_generation(4, 2, 8) == 1
    assert steps_per_generation(4, 1, 4, accumulation=2) == 2
    assert steps_per_generation(3, 1, 4) == 4


def test_a_workload_s_generation_holds_its_prompt_bound_and_completions():
    workload = load_workload("llama-2-7b")
    gen = g.generation_of(workload, world=1, batch=4)
    assert gen == g.Generation(completions=8, prompt_tokens=workload.train.max_length, completion_tokens=1024)
    phase = g.generation_phase(gen, 32, 32, 128, 32_000, 2)
    assert phase["kv_cache"] == pytest.approx(g.kv_cache(8, workload.train.max_length + 1024, 32, 32, 128, 2))


def test_a_rank_generates_its_batch_times_the_steps_one_generation_serves():
    tiny = load_workload("tiny")  # 4 rows a step, 4 completions a prompt, prompts of at most 14 tokens, 8 new
    assert g.generation_of(tiny, world=1) == g.Generation(completions=4, prompt_tokens=14, completion_tokens=8)
    assert g.generation_of(tiny, world=2).completions == 4
    assert g.generation_of(tiny, world=1, batch=3).completions == 12  # 3 a step: 4 steps hold whole groups of 4
    assert g.generation_of(tiny, world=1, max_length=100).prompt_tokens == 100  # the knobs' length bounds a prompt
    accumulating = tiny.model_copy(update={"train": tiny.train.model_copy(update={"gradient_accumulation_steps": 2})})
    assert g.generation_of(accumulating, world=1).completions == 8  # TRL generates for a whole accumulation
    # without a known prompt length, a prompt is bounded by the workload's max_length (TRL truncates none)
    llama = load_workload("llama-2-7b")  # 1 row a step, 8 completions a prompt of 1,024 tokens
    assert g.generation_of(llama, world=1) == g.Generation(completions=8, prompt_tokens=2048, completion_tokens=1024)
    assert g.generation_of(llama, world=1, batch=4).completions == 8
    assert g.generation_of(llama, world=1, batch=3).completions == 24


def test_a_sequence_is_the_prompt_and_its_completion():
    assert g.Generation(completions=4, prompt_tokens=14, completion_tokens=8).sequence == 22


def test_the_generation_phase_is_the_kv_cache_and_the_sampling_scores_by_hand():
    gen = g.Generation(completions=4, prompt_tokens=14, completion_tokens=8)
    # tiny: 2 layers, 2 KV heads of 32 dims, fp32, 512 tokens: 2 x 2 x 2 x 32 x 4 B x 4 x 22 tokens; 4 x 512 x 8 B
    assert g.generation_phase(gen, 2, 2, 32, 512, 4) == {"kv_cache": 90_112, "sampling_scores": 16_384}
