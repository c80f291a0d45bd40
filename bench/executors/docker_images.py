"""Docker images of the benchmark: tags derived from the lock file, engine checks, real builds.

An image is `dpo-bench/<flavor>:<sha256(lock + Dockerfile)[:12]>`, so a changed pin or Dockerfile is a new
image and an old run's env.json keeps naming exactly what it ran in. The build context is the project root,
filtered by /.dockerignore to the lock files and the optional build inputs docker/certs/*.crt (extra CA
certificates) and docker/wheelhouse/*.whl (local wheels).
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TextIO

from bench.errors import BenchError
from bench.paths import PROJECT_ROOT

DOCKER = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"
FLAVORS = ("cpu", "cuda")
OFFLINE_BASE_TAG = "dpo-bench/base:bookworm"
OFFLINE_BASE_SCRIPT = "docker/base/build-offline-base.sh"
HOST_CA_DIR = Path("/usr/local/share/ca-certificates")
HOST_WHEELS_DIR = Path("/opt/wheels")
WHEEL_GLOBS = ("torch-*.whl",)


def recipes_here(root: Path = PROJECT_ROOT) -> bool:
    """Whether the images can be built here: a checkout has docker/ (Dockerfiles and locks), an installed wheel not."""
    return (root / "docker").is_dir()


def docker_dir(flavor: str, root: Path = PROJECT_ROOT) -> Path:
    if flavor not in FLAVORS:
        raise BenchError(f"unknown image flavor {flavor!r}; available: {', '.join(FLAVORS)}")
    return root / "docker" / flavor


def tag_for(flavor: str, lock: bytes, dockerfile: bytes) -> str:
    """Pure: the tag of the image built from these exact lock and Dockerfile bytes."""
    return f"dpo-bench/{flavor}:{hashlib.sha256(lock + dockerfile).hexdigest()[:12]}"


def lock_file(flavor: str, root: Path = PROJECT_ROOT) -> Path | None:
    """The exact pins of an image flavour; None for a flavour without an image."""
    return docker_dir(flavor, root) / "requirements.lock" if flavor in FLAVORS else None


_CUDA_TOOLKIT_PIN = re.compile(r"^cuda-toolkit==(\d+)\.(\d+)", re.MULTILINE)


def lock_cuda_build(lock_text: str) -> str | None:
    """Pure: the CUDA release a lock's torch is built for, read from its `cuda-toolkit` pin ("13.0"); None: a lock
    without CUDA (the cpu flavor)."""
    found = _CUDA_TOOLKIT_PIN.search(lock_text)
    return f"{found[1]}.{found[2]}" if found else None


def image_cuda_build(flavor: str = "cuda", root: Path = PROJECT_ROOT) -> str | None:
    """The CUDA release the cells of `flavor`'s image run with (from its lock file)."""
    lock = lock_file(flavor, root)
    return lock_cuda_build(lock.read_text(encoding="utf-8")) if lock is not None else None


def image_tag(flavor: str, root: Path = PROJECT_ROOT) -> str:
    folder = docker_dir(flavor, root)
    try:
        return tag_for(flavor, (folder / "requirements.lock").read_bytes(), (folder / "Dockerfile").read_bytes())
    except OSError as exc:
        raise BenchError(f"{folder}: cannot read the lock file or Dockerfile ({exc.strerror or exc})") from None


def engine_available(timeout_s: float = 5.0) -> bool:
    """True when a docker engine answers `docker info` within `timeout_s`."""
    try:
        done = subprocess.run(
            [DOCKER, "info", "--format", "{{.ServerVersion}}"], capture_output=True, timeout=timeout_s
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and bool(done.stdout.strip())


def image_id(tag: str) -> str | None:
    """The image id (sha256:...) of a local image, or None when it is not there."""
    try:
        done = subprocess.run(
            [DOCKER, "image", "inspect", "--format", "{{.Id}}", tag], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def build_argv(flavor: str, tag: str, base_image: str | None, build_args: dict[str, str]) -> list[str]:
    """Pure: the `docker build` command line for `flavor`, run from the project root."""
    argv = [DOCKER, "build", "--progress=plain", "-f", f"docker/{flavor}/Dockerfile", "-t", tag]
    if base_image:
        argv += ["--build-arg", f"BASE_IMAGE={base_image}"]
    for key, value in sorted(build_args.items()):
        argv += ["--build-arg", f"{key}={value}"]
    return [*argv, "--label", f"dpo-bench.flavor={flavor}", "."]


def _copy_new(files: list[Path], target: Path) -> list[str]:
    target.mkdir(parents=True, exist_ok=True)
    copied = []
    for source in files:
        dest = target / source.name
        if dest.is_file() and dest.stat().st_size == source.stat().st_size:
            continue
        shutil.copy2(source, dest)
        copied.append(source.name)
    return copied


def stage_build_inputs(
    extra_ca_certs: str | None, wheels: Path | None = HOST_WHEELS_DIR, root: Path = PROJECT_ROOT
) -> list[str]:
    """Copy optional build inputs into docker/certs and docker/wheelhouse. `extra_ca_certs`: None, "auto"
    (the host's /usr/local/share/ca-certificates/*.crt), a folder or a .crt file. Returns what was copied."""
    copied: list[str] = []
    if extra_ca_certs:
        source = HOST_CA_DIR if extra_ca_certs == "auto" else Path(extra_ca_certs)
        certs = sorted(source.glob("*.crt")) if source.is_dir() else [source]
        missing = [str(c) for c in certs if not c.is_file()]
        if missing:
            raise BenchError(f"extra CA certificate {missing[0]} not found")
        copied += _copy_new(certs, root / "docker" / "certs")
    if wheels and wheels.is_dir():
        found = sorted(w for pattern in WHEEL_GLOBS for w in wheels.glob(pattern))
        copied += _copy_new(found, root / "docker" / "wheelhouse")
    return copied


def _stream(argv: list[str], out: TextIO, env: dict[str, str] | None = None) -> int:
    with subprocess.Popen(
        argv, cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            out.write(line)
            out.flush()
        return process.wait()


def build_offline_base(out: TextIO = sys.stdout) -> str:
    if _stream(["bash", str(PROJECT_ROOT / OFFLINE_BASE_SCRIPT), OFFLINE_BASE_TAG], out) != 0:
        raise BenchError(f"building the offline base image {OFFLINE_BASE_TAG} failed (see the output above)")
    return OFFLINE_BASE_TAG


def build_image(
    flavor: str,
    offline_base: bool,
    extra_ca_certs: str | None = None,
    wheels: Path | None = HOST_WHEELS_DIR,
    out: TextIO = sys.stdout,
) -> str:
    """Build the flavor's image for real (output streamed to `out`); returns its image id."""
    tag = image_tag(flavor)
    for name in stage_build_inputs(extra_ca_certs, wheels):
        print(f"build input staged: {name}", file=out, flush=True)
    base = build_offline_base(out) if offline_base else os.environ.get("BASE_IMAGE")
    build_args = {k: os.environ[k] for k in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL") if os.environ.get(k)}
    argv = build_argv(flavor, tag, base, build_args)
    print(f"$ {' '.join(argv)}", file=out, flush=True)
    if _stream(argv, out, env=os.environ | {"DOCKER_BUILDKIT": "1"}) != 0:
        raise BenchError(f"docker build of {tag} failed (see the output above)")
    built = image_id(tag)
    if built is None:
        raise BenchError(f"docker build reported success but {tag} is not in the local image store")
    return built


def image_report(tag: str, packages: tuple[str, ...]) -> dict:
    """Python and package versions inside the image (what env.json must record for docker runs)."""
    script = (
        "import json, sys\nfrom importlib import metadata\nout = {'python': sys.version.split()[0], 'packages': {}}\n"
        f"for name in {list(packages)!r}:\n"
        "    try: out['packages'][name] = metadata.version(name)\n"
        "    except metadata.PackageNotFoundError: out['packages'][name] = None\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run(
        [DOCKER, "run", "--rm", "--network", "none", tag, "python", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        raise BenchError(f"cannot read package versions from {tag}: {done.stderr.strip()[-300:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
