"""Which executor runs a run's cells: where `--executor local|docker|auto` puts them for a profile (this venv, the
flavor's image, or a Slurm cluster's nodes), and the executor itself, with the one-line notices of a fallback."""

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from bench.errors import BenchError
from bench.executors import docker_images as images
from bench.executors.base import Executor
from bench.matrix.profiles import HardwareProfile
from bench.paths import PROJECT_ROOT

if TYPE_CHECKING:
    from bench.assets.prepare import PreparedAssets

Where = Literal["local", "image"]
"""Where the cells run: in this venv (local executor) or in the flavor's docker image."""


def cells_run_in(choice: str, profile: HardwareProfile) -> Where | None:
    """Where the cells of `profile` will run with the `--executor` choice: in the flavor's image (docker, or auto
    where an engine answers), in this venv, or on a Slurm cluster's nodes (None: nothing to check here). `auto`
    may still fall back to this venv when the image cannot be built; cmd_run checks the machine again then."""
    if choice == "slurm":
        return None
    if choice == "docker":
        return "image"
    in_image = (
        choice == "auto"
        and profile.device != "cpu"  # a CPU profile runs anywhere: nothing to check, no engine to ask
        and profile.memory_budget_gb is None
        and profile.image_flavor in images.FLAVORS
        and images.recipes_here()
        and images.engine_available()
    )
    return "image" if in_image else "local"


def asset_mounts(assets: "PreparedAssets") -> list[Path]:
    """The local asset folders for the docker executor, mounted read-only; hub ids are not paths. The dataset is
    read-only too: a cell loads the dataset through links in its own folder, where `datasets` writes its caches
    (bench.assets.prepare.cell_dataset)."""
    folders = (assets.model, assets.tokenizer, assets.dataset, *assets.derived.values())
    return [Path(p) for p in folders if Path(p).is_absolute()]


def select_executor(choice: str, profile: HardwareProfile, run_dir: Path, assets: "PreparedAssets") -> Executor:
    """`local`, `docker` (engine and image required; a missing image is built), or `auto` (docker when it
    can be had, else local with a one-line notice)."""
    from bench.executors.local import LIVE_FILE, LocalExecutor

    def local(budget: int | None = None) -> LocalExecutor:
        return LocalExecutor(cwd=PROJECT_ROOT, memory_budget_bytes=budget, live_file=run_dir / LIVE_FILE)

    if choice == "local" or (choice == "auto" and profile.memory_budget_gb is not None):
        if profile.memory_budget_gb is not None:
            from bench.isolation import cgroups

            cgroups.check_available()  # one line when no memory cgroup can be made here
            cgroups.remove_stale()
            print(f"executor: local, each rank limited to {profile.memory_budget_gb:g} GiB by a memory cgroup")
        return local(profile.memory_budget_bytes)
    if not images.recipes_here():
        if choice == "docker":
            raise BenchError(
                "--executor docker: the images are built from a checkout's docker/ folder, which an installed package "
                "has not; use --executor local, or run from a checkout"
            )
        return local()
    if profile.image_flavor not in images.FLAVORS:
        if choice == "docker":
            raise BenchError(f"--executor docker: no image flavor {profile.image_flavor!r}; use --executor local")
        print(f"notice: no {profile.image_flavor} image exists; running cells with the local executor", flush=True)
        return local()
    tag = images.image_tag(profile.image_flavor)
    if not images.engine_available():
        if choice == "docker":
            raise BenchError(f"--executor docker: no docker engine answers `{images.DOCKER} info`; start dockerd")
        print("notice: no docker engine answers; running cells with the local executor", flush=True)
        return local()
    image_id = images.image_id(tag)
    if image_id is None:
        print(
            f"image {tag} is not built yet: building it (dpo-bench images --flavor {profile.image_flavor}) ...",
            flush=True,
        )
        offline = images.image_id(images.OFFLINE_BASE_TAG) is not None
        try:
            image_id = images.build_image(profile.image_flavor, offline_base=offline)
        except BenchError as exc:
            if choice == "docker":
                raise BenchError(f"{exc}; build it with `dpo-bench images --flavor {profile.image_flavor}`") from None
            print(f"notice: image {tag} could not be built ({exc}); running cells with the local executor")
            return local()
    from bench.executors.docker import DockerExecutor, container_spec

    spec = container_spec(tag, profile, PROJECT_ROOT, writable=[run_dir.resolve()], readonly=asset_mounts(assets))
    print(f"executor: docker, image {tag} ({image_id[:19]})", flush=True)
    return DockerExecutor(spec, image_id)
