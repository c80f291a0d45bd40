"""One rule for the reference (bench/matrix/reference.py): what it decides, that the worker and the estimator read it
and agree with it on every cell, and that no other module derives it again."""

import ast

import pytest

from bench.assets.prepare import PreparedAssets
from bench.estimate.predict import predict_cell
from bench.estimate.speed.model import setup_for
from bench.judge.mfu import no_grad_forwards
from bench.matrix.axes import Init, Method, Option, Quant, Setup
from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell
from bench.matrix.on_profile import CellOnProfile
from bench.matrix.plan import plan_for
from bench.matrix.profiles import Workload, load_profile, load_workload
from bench.matrix.recipes import Settings, resolve
from bench.matrix.reference import ReferencePlan, can_be_precomputed, reference_plan
from bench.matrix.scenario import expand, load_matrix, not_applicable_reason
from bench.matrix.settings import with_precomputed_reference
from bench.paths import PROJECT_ROOT
from bench.worker import models
from bench.worker.spec import WorkerSpec
from bench.worker.trainer_args import precompute_ref_log_probs

BENCH = PROJECT_ROOT / "bench"
CALLERS = ("matrix/plan.py",)
PLAN_READERS = (
    "estimate/predict.py",
    "estimate/speed/model.py",
    "judge/mfu.py",
    "worker/trainer_args.py",
    "worker/models.py",
)
"""The estimator, the speed model, the judge and the worker (through its spec, built from the Plan) read the
reference the Plan (bench/matrix/plan.py) resolved."""
PRECOMPUTED = Settings(reference="precomputed")


def cell(init: str, backend: str = "single", method: str = "dpo", options=(), setup=Setup.RECIPE) -> Cell:
    launcher = backend_spec(backend).default_launcher
    return Cell(
        method=method,
        init=init,
        quant=Quant.NONE,
        backend=backend,
        launcher=launcher,
        options=tuple(options),
        setup=setup,
    )


def asking(workload: Workload, on: bool) -> Workload:
    return workload.model_copy(update={"train": workload.train.model_copy(update={"precompute_ref": on})})


@pytest.mark.parametrize(
    ("c", "recipe", "workload_asks", "expected"),
    [
        (cell(Init.TWO_MODELS), Settings(), False, ReferencePlan(precomputed=False, separate_model=True)),
        # the option precomputes; TRL keeps the passed reference model
        (cell(Init.TWO_MODELS, options=[Option.PRECOMPUTE_REF]), Settings(), False, ReferencePlan(True, True)),
        # the recipe precomputes and passes no reference model
        (cell(Init.TWO_MODELS, "zero2"), PRECOMPUTED, False, ReferencePlan(True, False)),
        (cell(Init.TWO_MODELS, "zero2"), Settings(reference="model"), False, ReferencePlan(False, True)),
        (cell(Init.ONE_ADAPTER, options=[Option.PRECOMPUTE_REF]), Settings(), False, ReferencePlan(True, False)),
        (cell(Init.ONE_ADAPTER), Settings(), True, ReferencePlan(True, False)),
        (cell(Init.TWO_MODELS, method=Method.KTO), Settings(), True, ReferencePlan(True, True)),
        # the workload's flag leaves two_adapters' frozen `ref` adapter alone (its N/A rule for the option)
        (cell(Init.TWO_ADAPTERS), Settings(), True, ReferencePlan(False, False)),
        # a reference-free method has nothing to precompute
        (cell(Init.ONE_ADAPTER, method=Method.SFT), Settings(), True, ReferencePlan(False, False)),
        (cell(Init.ONE_ADAPTER, method=Method.ORPO), PRECOMPUTED, False, ReferencePlan(False, False)),
    ],
)
def test_the_rule(c, recipe, workload_asks, expected):
    assert reference_plan(c, recipe, asking(load_workload("tiny"), workload_asks)) == expected


def test_the_workload_flag_means_what_the_option_means():
    """A workload asking for precomputation decides as the option on the cells with_precomputed_reference marks."""
    tiny = load_workload("tiny")
    cells = [c for c in expand(load_matrix()) if not_applicable_reason(CellOnProfile(c, load_profile("cpu"))) is None]
    marked = {c.id: c for c in with_precomputed_reference(cells, asking(tiny, True))}
    for c in cells:
        settings = resolve(c, "cpu").settings
        asked = reference_plan(c, settings, asking(tiny, True))
        assert asked.precomputed == (can_be_precomputed(c) or reference_plan(c, settings, tiny).precomputed), c.id
        with_option = c.model_copy(update={"options": tuple(sorted({*c.options, Option.PRECOMPUTE_REF}))})
        if with_option.id in marked:
            assert asked == reference_plan(with_option, settings, tiny), c.id


ASSETS = PreparedAssets(model="m", tokenizer="t", dataset="d")


@pytest.mark.parametrize("hw", ["cpu", "2xA10"])
@pytest.mark.parametrize("workload_asks", [False, True])
def test_the_worker_and_the_estimator_agree_on_every_cell(monkeypatch, hw, workload_asks):
    """The trainer's precompute_ref_log_probs, the models the worker builds, the memory estimate's reference model and
    the speed model's forwards without gradient all follow the one rule."""
    monkeypatch.setattr(models, "verify_installed", lambda recipe: None)
    profile = load_profile(hw)
    workload = asking(load_workload(profile.workload), workload_asks)
    cells = [c for c in expand(load_matrix()) if not_applicable_reason(CellOnProfile(c, profile)) is None]
    assert any(Option.PRECOMPUTE_REF in c.options for c in cells)
    assert any(resolve(c, profile.device).settings.reference == "precomputed" for c in cells) or hw == "cpu"
    for c in cells:
        plan = reference_plan(c, resolve(c, profile.device).settings, workload)
        spec = WorkerSpec.from_plan(plan_for(c, profile, workload), ASSETS, "/tmp/cell")
        assert precompute_ref_log_probs(spec) == plan.precomputed, c.id
        if c.init == Init.TWO_MODELS:
            built = models.build_models(spec, load=lambda spec: object())
            assert (built.ref_model is not None) == plan.separate_model, c.id
        predicted = predict_cell(c, profile, workload)
        held = {**predicted.terms, **predicted.host_terms}  # an offload backend keeps it in host memory
        assert ("reference_model" in held) == plan.separate_model, c.id
        step = setup_for(plan_for(c, profile, workload)).step
        assert step.no_grad_forwards == no_grad_forwards(c.method, plan.precomputed), c.id


def _reads(path) -> list[str]:
    """What in `path` derives the reference's source itself: the option's id, the recipe's `precomputed` value,
    or the workload's precompute_ref flag."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in ("PRECOMPUTE_REF", "precompute_ref"):
            found.append(f"{node.attr} (line {node.lineno})")
        if isinstance(node, ast.Constant) and node.value in ("precomputed", "precompute_ref"):
            found.append(f"{node.value!r} (line {node.lineno})")
    return found


def test_the_plan_reads_the_rule_and_its_readers_derive_nothing_themselves():
    for name in CALLERS:
        path = BENCH / name
        assert "reference_plan" in {n.id for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Name)}
        assert _reads(path) == [], name
    for name in PLAN_READERS:
        path = BENCH / name
        read = {n.attr for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Attribute)}
        assert read & {"reference", "reference_for"}, name
        assert _reads(path) == [], name


def test_nothing_in_the_worker_or_the_estimator_derives_it():
    """The worker and the estimator are where a second rule would change what runs or what is predicted."""
    for folder in ("worker", "estimate"):
        for path in sorted((BENCH / folder).rglob("*.py")):
            assert _reads(path) == [], path.relative_to(BENCH)


def test_the_checker_sees_a_second_rule(tmp_path):
    second = tmp_path / "second.py"
    second.write_text("def f(spec):\n    return spec.recipe.settings.reference == 'precomputed'\n")
    assert _reads(second) == ["'precomputed' (line 2)"]
    option = tmp_path / "option.py"
    option.write_text("def f(cell):\n    return Option.PRECOMPUTE_REF in cell.options or cell.w.train.precompute_ref\n")
    assert len(_reads(option)) == 2
