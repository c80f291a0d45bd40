"""Every launcher's plan for one cell is what it was when pinned (pinned_launches.json): the argv, the environment
and the files of its single-node launch on the CPU and on GPUs, its two-node job line, its rank variables."""

import json
from pathlib import Path

import pytest

from tests.unit.launchers.pinned import CELLS, one_launcher

PINNED = json.loads((Path(__file__).parent / "pinned_launches.json").read_text())


@pytest.mark.parametrize("launcher", sorted(CELLS))
def test_a_launchers_plans_are_the_pinned_ones(launcher):
    assert json.loads(json.dumps(one_launcher(launcher, *CELLS[launcher]))) == PINNED[launcher]


def test_every_launcher_is_pinned():
    from bench.matrix.axes import Launcher

    assert set(PINNED) == set(CELLS) == {str(name) for name in Launcher}
