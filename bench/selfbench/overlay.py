"""Overlay venvs: this venv with a few packages replaced (a released version, a local checkout or a wheel), so that
an A/B can put library versions side by side (bench/selfbench/ab.py `--base-with`, `--head-with`).

An overlay's site-packages holds only the replaced packages and a `.pth` that adds this venv's site-packages after
them: its interpreter imports the overlay's versions and this venv's everything else, and `importlib.metadata`
reports the overlay's version to env.json. Its bin/ links this venv's non-Python programs (mpirun); the Python
launchers run as `python -m <module>` through the overlay's interpreter, so every process of a cell runs the
overlay. DeepSpeed's host ops are copied from this venv. Overlays live in build/overlays/<key>; one of released
versions is reused, one with a local checkout is made again for every A/B."""

import fcntl
import hashlib
import json
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from bench.errors import BenchError
from bench.paths import BUILD_DIR
from bench.results.env import OVERLAY_STAMP

OVERLAYS_DIR = BUILD_DIR / "overlays"
BASE_PTH = "_dpo_bench_base.pth"
"""The overlay's `.pth` file that puts this venv's site-packages after its own."""
PIP_LOG = "pip.log"
LOCAL_FORM = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)=(?!=)(?P<path>.+)")
"""NAME=PATH: a local checkout (a folder with pyproject.toml or setup.py) or a wheel."""


@dataclass(frozen=True)
class PackageSpec:
    """One package of an overlay, as `--base-with`/`--head-with` named it."""

    text: str
    """As given: `trl==1.15.0`, `trl=/path/to/trl`."""
    name: str
    """The distribution's name, canonical (`trl`)."""
    install: str
    """What pip installs: the requirement, or the folder's or wheel's absolute path."""
    local: bool = False
    """A local checkout or wheel (the overlay is made again for every A/B)."""
    requirement: Requirement | None = None
    """The version the overlay must hold (None for a local one: whatever it builds)."""


def parse_package(text: str, flag: str) -> PackageSpec:
    """`NAME==VERSION` (any pip requirement with a version or a URL) or `NAME=PATH`; one line naming `flag` when it
    is neither."""
    local = LOCAL_FORM.fullmatch(text.strip())
    if local:
        path = Path(local["path"]).expanduser().absolute()
        is_project = path.is_dir() and any((path / f).is_file() for f in ("pyproject.toml", "setup.py"))
        if not is_project and not (path.is_file() and path.suffix == ".whl"):
            raise BenchError(
                f"{flag} {text}: {path} is neither a package folder (pyproject.toml or setup.py) nor a wheel"
            )
        return PackageSpec(text, canonicalize_name(local["name"]), str(path), local=True)
    try:
        requirement = Requirement(text)
    except InvalidRequirement:
        raise BenchError(
            f"{flag} {text!r}: use NAME==VERSION (a pip requirement) or NAME=PATH (a local checkout or a wheel)"
        ) from None
    if not requirement.specifier and not requirement.url:
        name = requirement.name
        raise BenchError(f"{flag} {text}: name a version ({name}==1.2.3) or a checkout ({name}=/path/to/{name})")
    return PackageSpec(text, canonicalize_name(requirement.name), text, requirement=requirement)


def parse_packages(texts: Sequence[str] | None, flag: str) -> tuple[PackageSpec, ...]:
    specs = tuple(parse_package(t, flag) for t in texts or ())
    names = [s.name for s in specs]
    if twice := sorted({n for n in names if names.count(n) > 1}):
        raise BenchError(f"{flag}: {', '.join(twice)} named more than once")
    return specs


@dataclass(frozen=True)
class Overlay:
    prefix: Path
    packages: tuple[PackageSpec, ...]
    versions: dict[str, str] = field(default_factory=dict)
    """Each package's version in the overlay (its dist-info's)."""

    @property
    def python(self) -> str:
        return str(self.prefix / "bin" / "python")

    @property
    def label(self) -> str:
        """`trl 1.15.0, peft 0.17.0`."""
        return ", ".join(f"{name} {version}" for name, version in self.versions.items())


def base_prefix() -> Path:
    """This venv at its real path: a venv reached through a link (a worktree's `.venv`) names the same files as the
    venv itself, and DeepSpeed keys a built op on its source paths (bench/executors/local.py venv_python)."""
    return Path(sys.prefix).resolve()


def overlay_key(specs: Sequence[PackageSpec]) -> str:
    """Names this venv and the packages: the same A/B side again finds its overlay."""
    over = str(base_prefix())
    text = json.dumps({"over": over, "python": sys.version, "packages": sorted(s.text for s in specs)})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def site_packages(prefix: Path) -> Path:
    """A venv's site-packages (where pip installs for its interpreter)."""
    return Path(sysconfig.get_path("purelib", "venv", vars={"base": str(prefix), "platbase": str(prefix)}))


def base_pth() -> str:
    """The `.pth` line that adds this venv's site-packages (and what their `.pth` files add) after the overlay's."""
    dirs = list(dict.fromkeys(os.path.realpath(d) for d in site.getsitepackages() if Path(d).is_dir()))
    return "import site; " + "; ".join(f"site.addsitedir({d!r})" for d in dirs) + "\n"


def pip_argv(python: str, specs: Sequence[PackageSpec]) -> list[str]:
    """pip run by the overlay's interpreter (this venv's pip, through the .pth): only the named packages (their
    dependencies are this venv's), never uninstalling this venv's copy; a checkout builds with this venv's build
    tools (setuptools), so that an offline box can build it."""
    argv = [python, "-m", "pip", "install", "--no-deps", "--ignore-installed", "--no-warn-conflicts"]
    argv += ["--disable-pip-version-check", "--no-input"]
    if any(s.local and Path(s.install).is_dir() for s in specs):
        argv.append("--no-build-isolation")
    return [*argv, *(s.install for s in specs)]


def python_script(path: Path) -> bool:
    """A file whose first line runs a Python interpreter (an entry point pip wrote for this venv's python)."""
    try:
        with path.open("rb") as f:
            first = f.readline(256)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def link_programs(base_bin: Path, bin_dir: Path) -> list[str]:
    """Link this venv's executables that are not Python scripts (mpirun, ninja) into the overlay's bin/; the names
    linked."""
    linked = []
    for path in sorted(base_bin.iterdir()):
        target = bin_dir / path.name
        if target.exists() or target.is_symlink() or path.name.startswith(("python", "activate", "Activate")):
            continue
        if path.is_file() and os.access(path, os.X_OK) and not python_script(path):
            target.symlink_to(path.resolve())
            linked.append(path.name)
    return linked


VERSIONS_SCRIPT = """
import importlib.util, json, sys
from importlib import metadata
out = {}
for name in sys.argv[1:]:
    dist = metadata.distribution(name)
    spec = importlib.util.find_spec(name.replace("-", "_"))
    out[name] = {"version": dist.version, "location": str(dist.locate_file("")),
                 "module": getattr(spec, "origin", None) if spec else None}
print(json.dumps(out))
"""


def installed(python: str, names: Sequence[str]) -> dict[str, dict]:
    """Per package, as the overlay's interpreter sees it: version (dist-info), where its distribution and module
    are."""
    done = subprocess.run([python, "-c", VERSIONS_SCRIPT, *names], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise BenchError(f"overlay {python}: cannot read the installed versions ({last})")
    return json.loads(done.stdout)


def checked_versions(prefix: Path, specs: Sequence[PackageSpec], found: dict[str, dict]) -> dict[str, str]:
    """name -> version; one line when a package is not the overlay's own or not the version asked for."""
    own = site_packages(prefix).resolve()
    versions = {}
    for spec in specs:
        info = found[spec.name]
        where = [Path(info["location"]), *([Path(info["module"])] if info.get("module") else [])]
        if not all(p.resolve().is_relative_to(own) for p in where):
            raise BenchError(f"overlay {prefix}: {spec.name} resolves to {where[-1]}, not to the overlay's own copy")
        if spec.requirement is not None and not spec.requirement.specifier.contains(info["version"], prereleases=True):
            raise BenchError(f"overlay {prefix}: {spec.text} asked, {info['version']} installed")
        versions[spec.name] = info["version"]
    return versions


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Held while one process makes or checks an overlay (two A/Bs may want the same)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def make_venv(prefix: Path) -> None:
    """The bare overlay: a venv without pip, this venv's site-packages after its own, its programs linked, its
    DeepSpeed host ops copied."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True, capture_output=True)
    own = site_packages(prefix)
    own.mkdir(parents=True, exist_ok=True)
    (own / BASE_PTH).write_text(base_pth(), encoding="utf-8")
    link_programs(base_prefix() / "bin", prefix / "bin")
    extensions = base_prefix() / "torch_extensions"  # bench/executors/local.py extensions_dir
    if extensions.is_dir():
        shutil.copytree(extensions, prefix / "torch_extensions", symlinks=True)


def install(prefix: Path, specs: Sequence[PackageSpec]) -> None:
    log = prefix / PIP_LOG
    with log.open("w") as out:
        done = subprocess.run(pip_argv(str(prefix / "bin" / "python"), specs), stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        why = next((ln for ln in reversed(lines) if "ERROR" in ln), lines[-1] if lines else f"exit {done.returncode}")
        raise BenchError(f"overlay: pip could not install {' '.join(s.text for s in specs)}: {why.strip()} ({log})")


def write_stamp(prefix: Path, overlay: Overlay) -> None:
    """What env.json's `installed_from` and `lock_differences` read (bench/results/env.py installation)."""
    from bench.matrix.packages import installed_versions

    here = installed_versions(tuple(overlay.versions))
    differences = [f"{name} {version} (over {here.get(name)})" for name, version in overlay.versions.items()]
    stamp = {"over": str(base_prefix()), "packages": [s.text for s in overlay.packages], "versions": overlay.versions}
    (prefix / OVERLAY_STAMP).write_text(json.dumps(stamp | {"differences": differences}, indent=2) + "\n")


def overlay_for(specs: Sequence[PackageSpec], root: Path = OVERLAYS_DIR, say=print) -> Overlay:
    """The overlay of `specs` over this venv: made (or, for released versions only, reused) and checked."""
    prefix = root / overlay_key(specs)
    names = [s.name for s in specs]
    with locked(root / f"{prefix.name}.lock"):
        if (prefix / OVERLAY_STAMP).is_file() and not any(s.local for s in specs):
            versions = checked_versions(prefix, specs, installed(str(prefix / "bin" / "python"), names))
            return Overlay(prefix, tuple(specs), versions)
        shutil.rmtree(prefix, ignore_errors=True)
        say(f"compare-ab: making an overlay venv of {' '.join(s.text for s in specs)} in {prefix}")
        make_venv(prefix)
        install(prefix, specs)
        versions = checked_versions(prefix, specs, installed(str(prefix / "bin" / "python"), names))
        overlay = Overlay(prefix, tuple(specs), versions)
        write_stamp(prefix, overlay)
    return overlay
