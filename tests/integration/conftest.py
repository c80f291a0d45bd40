"""Fixtures the integration tests share."""

from pathlib import Path

import pytest

from bench.executors import docker_images as images


@pytest.fixture(scope="module")
def image() -> str:
    """The built cpu image's id (the `docker` tests: make test-docker builds it first)."""
    assert images.engine_available(), "no docker engine answers"
    image_id = images.image_id(images.image_tag("cpu"))
    assert image_id, f"{images.image_tag('cpu')} is not built: make images FLAVOR=cpu"
    return image_id


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """The tiny workload's model and tokenizer saved to one folder, as a Hub checkpoint is laid out."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bench.assets.prepare import prepare
    from bench.matrix.profiles import load_workload

    tiny = prepare(load_workload("tiny"))
    folder = tmp_path_factory.mktemp("checkpoint") / "tiny-llama"
    AutoModelForCausalLM.from_pretrained(tiny.model).save_pretrained(str(folder))
    AutoTokenizer.from_pretrained(tiny.tokenizer).save_pretrained(str(folder))
    return folder
