"""The estimator's forwards without gradient (KTO's KL batch, online RL's generation and scoring) and where a reward
model's weights are charged (bench/estimate/predict.py)."""

import pytest

from bench.estimate import generation_terms as g
from bench.estimate import terms
from bench.estimate.knobs import Knobs
from bench.estimate.predict import _layer_activations, _no_grad_phases, _setting, predict_cell
from bench.estimate.shapes import shapes_for
from bench.matrix.axes import Backend, Init, Method, Option, Quant
from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell
from bench.matrix.plan import plan_for
from bench.matrix.profiles import load_profile, load_workload


def cell(backend=Backend.ZERO2, method=Method.DPO, options=()):
    launcher = backend_spec(backend).default_launcher
    return Cell(
        init=Init.TWO_MODELS, quant=Quant.NONE, backend=backend, launcher=launcher, method=method, options=list(options)
    )


def phases_of(method, knobs=None):
    knobs = knobs or Knobs()
    profile, workload = load_profile("2xA10"), load_workload("small")
    shapes = shapes_for(workload)
    s = _setting(plan_for(cell(method=method), profile, workload), Backend.ZERO2, shapes, knobs)
    rows, seq, per_layer = _layer_activations(s)
    return _no_grad_phases(s, per_layer, rows * seq, 1), s, per_layer, rows * seq


def test_kto_adds_its_kl_batch_forward_and_dpo_nothing():
    assert phases_of(Method.DPO)[0] == {}
    phases, s, per_layer, tokens = phases_of(Method.KTO)
    forward = terms.no_grad_forward(per_layer, tokens, s.shapes.vocab, s.b)
    assert phases == {"kl_batch": {"kl_batch_forward": forward}}


@pytest.mark.parametrize("knobs", [Knobs(), Knobs(batch_size=3, max_length=40)])
def test_an_online_method_generates_its_own_batch_under_the_knobs_then_scores_it(knobs):
    phases, s, per_layer, tokens = phases_of(Method.GRPO, knobs)
    gen = g.generation_of(s.workload, 2, knobs.batch_size, knobs.max_length)
    kv = (s.shapes.layers, s.shapes.kv_heads, s.shapes.head_dim, s.shapes.vocab, s.b)
    assert phases["generation"] == g.generation_phase(gen, *kv)
    assert phases["scoring"] == {"scoring_forward": g.scoring_forward(per_layer, tokens, s.shapes.vocab, s.b)}


def test_the_knobs_change_what_an_online_method_generates():
    plain, knobbed = phases_of(Method.GRPO)[0], phases_of(Method.GRPO, Knobs(batch_size=3, max_length=40))[0]
    assert plain["generation"]["kv_cache"] != knobbed["generation"]["kv_cache"]


def test_zero3_shards_a_reward_model_over_the_ranks_and_zero2_keeps_it_whole():
    profile, workload = load_profile("2xA10"), load_workload("small")

    def reward(backend):
        online = cell(backend, Method.GRPO, [Option.REWARD_MODEL])
        return predict_cell(online, profile, workload).terms["reward_model"]

    assert reward(Backend.ZERO3) == pytest.approx(reward(Backend.ZERO2) / 2)
