"""The open models' configs shipped as data (scenarios/models/) build, on the meta device, the parameter count their
publishers state, as scenarios/models/README.md says."""

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from bench.assets.model_config import MODELS_DIR as MODELS
from bench.assets.model_config import shipped_models


def published() -> dict[str, str]:
    """Folder -> the parameter count the README states, in billions, as written."""
    return {m.folder: m.billions for m in shipped_models()}


def test_every_shipped_config_has_a_row_with_its_source():
    folders = {p.parent.name for p in MODELS.glob("*/config.json")}
    assert folders and folders == set(published())


@pytest.mark.parametrize("folder", sorted(published()))
def test_the_config_builds_the_published_parameter_count(folder):
    config = AutoConfig.from_pretrained(MODELS / folder)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    billions = sum(p.numel() for p in model.parameters()) / 1e9
    stated = published()[folder]
    half_unit = 0.5 * 10 ** -len(stated.partition(".")[2])  # the count must round to the stated digits
    assert abs(billions - float(stated)) <= half_unit, f"{folder}: {billions:.4f} B, the README says {stated}"
