"""Fixtures the integration tests share."""

import pytest

from bench.executors import docker_images as images


@pytest.fixture(scope="module")
def image() -> str:
    """The built cpu image's id (the `docker` tests: make test-docker builds it first)."""
    assert images.engine_available(), "no docker engine answers"
    image_id = images.image_id(images.image_tag("cpu"))
    assert image_id, f"{images.image_tag('cpu')} is not built: make images FLAVOR=cpu"
    return image_id
