"""The worker's seam for training methods: the method table names a trainer module, and the worker builds the cell's
trainer through it. A new method is one table entry plus its own module."""

import sys
import types
from types import SimpleNamespace

from bench.matrix import methods
from bench.matrix.axes import Method
from bench.matrix.methods import METHODS, MethodSpec
from bench.worker import build
from bench.worker.trainers import dpo, trainer_module


def test_every_method_has_a_stage_module_with_a_trainer():
    for method in Method:
        assert callable(trainer_module(method).trainer)
    assert trainer_module(Method.DPO) is dpo


def test_a_new_method_is_one_table_entry_and_its_module(monkeypatch):
    module = types.ModuleType("bench.worker.trainers.fake_method")
    module.trainer = lambda spec, callbacks: ("fake trainer", spec.cell.method, callbacks)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(
        METHODS, "fake", MethodSpec("fake", trainer="trl.Fake", reference=False, trainer_module="fake_method")
    )
    spec = SimpleNamespace(cell=SimpleNamespace(method="fake"))
    assert build.trl_trainer(spec, ["cb"]) == ("fake trainer", "fake", ["cb"])
    assert methods.method_spec("fake").trainer == "trl.Fake"
