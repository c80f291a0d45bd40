"""Task files for cloud renters: `python -m bench export-task --to skypilot --hw 2xA10` writes a SkyPilot task that
runs this suite on rented GPUs, in the pinned image, and says how the results come back.

The task syncs this checkout (`workdir`), runs the cells with the local executor inside the pinned image (the image
holds the locked packages; the code comes from the checkout, as with the docker executor) and leaves the results
either in a bucket mounted at RESULTS_MOUNT (`--bucket`) or in the cluster's copy of `results/`, to rsync down.
"""

import argparse
import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from bench import images
from bench.errors import BenchError
from bench.profiles import NAME_PATTERN, HardwareProfile, load_profile

RESULTS_MOUNT = "/dpo-bench-results"
WORKDIR = "~/sky_workdir"
"""Where SkyPilot puts the synced workdir on each node."""
ACCELERATORS = {
    "A10": "A10",
    "A100-80G": "A100-80GB",
    "A100": "A100",
    "H100": "H100",
    "H200": "H200",
    "L4": "L4",
    "4090": "RTX4090",
}
"""Profile name suffix -> SkyPilot accelerator name (`sky show-gpus`)."""
_NAME = re.compile(r"^(?:\d+x)?\d+x(?P<device>.+)$")
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
    """`A10:2`: the device of the profile's name, times the devices of one node; None for CPU profiles."""
    if profile.device == "cpu":
        return None
    if profile.device != "cuda":
        raise BenchError(f"export-task: no SkyPilot accelerator for {profile.device} profile {profile.name}")
    match = _NAME.match(profile.name)
    device = ACCELERATORS.get(match["device"]) if match else None
    if device is None:
        known = ", ".join(sorted(ACCELERATORS))
        raise BenchError(f"export-task: profile {profile.name}: no SkyPilot accelerator for its name ({known})")
    return f"{device}:{max(profile.device_count, profile.processes_per_node)}"


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


def cmd_export_task(args: argparse.Namespace) -> int:
    profile = load_profile(args.hw, Path(args.scenarios))
    if not NAME_PATTERN.match(args.run_id) or not NAME_PATTERN.match(args.cluster):
        raise BenchError("export-task: --run-id and --cluster: letters, digits, '_', '-', '.'")
    image = args.image or images.image_tag(profile.image_flavor)
    task = skypilot_task(profile, image, args.run_id, args.bucket)
    output = Path(args.output or f"dpo-bench-{profile.name}.sky.yaml")
    output.write_text(render(task, profile, args.cluster, args.bucket), encoding="utf-8")
    print(f"wrote {output}")
    print(f"  sky launch -c {args.cluster} {output}")
    if args.bucket:
        print(f"  results: {args.bucket}/{profile.name}/{args.run_id}/")
    else:
        print(f"  rsync -Pavz {args.cluster}:{WORKDIR}/results/{profile.name}/ results/{profile.name}/")
    return 0


def add_command(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser("export-task", help="write a cloud task file (SkyPilot) that runs the suite on rented GPUs")
    p.add_argument("--to", choices=["skypilot"], default="skypilot")
    p.add_argument("--hw", required=True, help="hardware profile (scenarios/hardware/<hw>.yaml), e.g. 2xA10")
    p.add_argument("--image", default=None, help="image reference the cloud pulls (default: the pinned image's tag)")
    p.add_argument("--bucket", default=None, metavar="URI", help="s3://, gs://, ... bucket mounted for the results")
    p.add_argument("--run-id", default="sky", help="run id of the results (default: %(default)s)")
    p.add_argument("--cluster", default="dpo-bench", help="SkyPilot cluster name in the printed commands")
    p.add_argument("--output", default=None, help="task file (default: dpo-bench-<hw>.sky.yaml)")
    p.set_defaults(func=cmd_export_task)
