"""One module per training method (bench/matrix/methods.py names it): each builds its TRL trainer for a cell with
`trainer(spec, callbacks)`."""

import importlib
from types import ModuleType

from bench.matrix.methods import method_spec


def stage_for(method: str) -> ModuleType:
    return importlib.import_module(f"{__name__}.{method_spec(method).stage}")
