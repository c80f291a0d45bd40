"""Task files for cloud renters: `python -m bench export-task --to skypilot --hw 2xA10` writes a SkyPilot task that
runs this suite on rented GPUs, in the pinned image, and says how the results come back.

The task syncs this checkout (`workdir`), runs the cells with the local executor inside the pinned image (the image
holds the locked packages; the code comes from the checkout, as with the docker executor) and leaves the results
either in a bucket mounted at RESULTS_MOUNT (`--bucket`) or in the cluster's copy of `results/`, to rsync down.
"""

import re
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from bench.errors import BenchError
from bench.matrix.gpus import gpu, gpu_by_card, load_catalog
from bench.matrix.profiles import HardwareProfile

RESULTS_MOUNT = "/dpo-bench-results"
WORKDIR = "~/sky_workdir"
"""Where SkyPilot puts the synced workdir on each node."""
_BUCKET = re.compile(r"^(s3|gs|r2|cos|oci)://[A-Za-z0-9._/-]+$")


class SkyResources(BaseModel):
    model_config = ConfigDict(extra="forbid")
    accelerators: str | None = None
    cpus: str | None = None
    image_id: str
    disk_size: int = Field(default=256, ge=50)


class SkyMount(BaseModel):
    model_config = ConfigDict(extra="forbid")
    source: str
    mode: Literal["MOUNT", "COPY"] = "MOUNT"


class SkyTask(BaseModel):
    """The part of SkyPilot's task schema this export writes (docs.skypilot.co, "YAML spec")."""

    model_config = ConfigDict(extra="forbid")
    name: str
    workdir: str
    num_nodes: int = Field(ge=1)
    resources: SkyResources
    envs: dict[str, str]
    file_mounts: dict[str, SkyMount] = Field(default_factory=dict)
    setup: str
    run: str


def accelerators(profile: HardwareProfile) -> str | None:
    """`A10:2`: the SkyPilot name of the profile's GPU (the catalog's `skypilot`), times the devices of one node;
    None for CPU profiles."""
    if profile.device == "cpu":
        return None
    if profile.device != "cuda":
        raise BenchError(f"export-task: no SkyPilot accelerator for {profile.device} profile {profile.name}")
    entry = gpu(profile.gpu) if profile.gpu else gpu_by_card(profile.card) if profile.card else None
    if entry is None or entry.skypilot is None:
        known = ", ".join(g.name for g in load_catalog().gpus if g.skypilot)
        raise BenchError(f"export-task: profile {profile.name}: no SkyPilot accelerator for its GPU ({known})")
    return f"{entry.skypilot}:{max(profile.device_count, profile.processes_per_node)}"


def skypilot_task(profile: HardwareProfile, image: str, run_id: str, bucket: str | None = None) -> SkyTask:
    if profile.nodes > 1:
        raise BenchError(
            f"export-task: profile {profile.name} spans {profile.nodes} nodes; the exported task runs one node's "
            "cells with the local executor: run multi-node profiles with --executor slurm (docs/slurm.md)"
        )
    if bucket is not None and not _BUCKET.match(bucket):
        raise BenchError(f"export-task: --bucket {bucket!r}: expected s3://, gs://, r2://, cos:// or oci:// and a name")
    results = RESULTS_MOUNT if bucket else "results"
    run = (
        f"python -m bench --results {results} run --hw {profile.name} --executor local --run-id $RUN_ID\n"
        f"python -m bench --results {results} matrix --hw {profile.name} --run-id $RUN_ID || true\n"
    )
    setup = (
        "# the pinned image holds every locked package; the suite itself is the synced checkout\n"
        'python -c \'import torch, trl; print("torch", torch.__version__, "trl", trl.__version__)\'\n'
    )
    return SkyTask(
        name=f"dpo-bench-{profile.name.lower()}",
        workdir=".",
        num_nodes=profile.nodes,
        resources=SkyResources(
            accelerators=accelerators(profile),
            cpus=None if profile.device != "cpu" else f"{profile.processes * profile.threads_per_process}+",
            image_id=f"docker:{image}",
        ),
        envs={"RUN_ID": run_id, "HW": profile.name},
        file_mounts={RESULTS_MOUNT: SkyMount(source=bucket)} if bucket else {},
        setup=setup,
        run=run,
    )


def render(task: SkyTask, profile: HardwareProfile, cluster: str, bucket: str | None) -> str:
    fetch = (
        f"results are written to {bucket} (mounted at {RESULTS_MOUNT})"
        if bucket
        else f"results come back with: rsync -Pavz {cluster}:{WORKDIR}/results/{profile.name}/ results/{profile.name}/"
    )
    header = (
        f"# dpo-bench on {profile.name} through SkyPilot (written by `python -m bench export-task`).\n"
        f"# sky launch -c {cluster} <this file>; {fetch}; sky down {cluster}\n"
        "# image_id must name an image the cloud can pull: push the pinned image (make images) to your registry.\n"
    )
    data = task.model_dump(exclude_none=True)
    if not data["file_mounts"]:
        del data["file_mounts"]
    return header + yaml.dump(data, Dumper=_BlockDumper, sort_keys=False)


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (setup, run) as `|` blocks, as people write SkyPilot tasks."""


_BlockDumper.add_representer(
    str,
    lambda dumper, value: dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None),
)
