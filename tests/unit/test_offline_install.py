"""The offline install over a GPU box's own Python (docker/offline/): what the wheelhouse collects is closed under
the packages' own requirements, bitsandbytes keeps one native library, and the differences from the lock are named.
CI installs a CPU wheelhouse over a base environment with the index unreachable and trains a cell (.ci/offline.sh)."""

import importlib.util
import json
import re
import sys
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from bench.paths import PROJECT_ROOT

OFFLINE = PROJECT_ROOT / "docker" / "offline"


def load(name: str):
    sys.path.insert(0, str(OFFLINE))
    try:
        spec = importlib.util.spec_from_file_location(name, OFFLINE / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(OFFLINE))


wheelhouse = load("wheelhouse")
install = load("install")


def requirements_of(name: str) -> set[str]:
    found = set()
    for text in metadata.requires(name) or []:
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            found.add(wheelhouse.canonical(requirement.name))
    return found


def test_every_collected_package_has_the_locks_version():
    sections = wheelhouse.sections()
    for flavor in ("cpu", "cuda"):
        lock = PROJECT_ROOT / "docker" / flavor / "requirements.lock"
        versions = wheelhouse.lock_versions(lock)
        pinned = wheelhouse.pinned(sections["install"] + sections["fallback"], versions, lock)
        assert all("==" in p for p in pinned)


def test_the_wheelhouse_and_the_base_hold_everything_the_suite_imports():
    sections = {k: {wheelhouse.canonical(n) for n in v} for k, v in wheelhouse.sections().items()}
    known = sections["install"] | sections["fallback"] | sections["base"]
    for name in sections["install"]:
        missing = requirements_of(name) - known
        assert not missing, f"{name} requires {sorted(missing)}: add them to docker/offline/packages.txt"
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    project = project["dependencies"] + project["optional-dependencies"]["train"]
    direct = {wheelhouse.canonical(re.split(r"[<>=!~ \[]", d)[0]) for d in project}
    assert direct <= sections["install"] | sections["base"]
    assert not sections["install"] & sections["base"]


def test_bitsandbytes_keeps_only_the_boxs_native_library(tmp_path):
    wheel = tmp_path / "bitsandbytes-0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("bitsandbytes/__init__.py", "")
        for lib in ("cpu", "cuda126", "cuda130", "rocm70"):
            zf.writestr(f"bitsandbytes/libbitsandbytes_{lib}.so", b"x" * 1000)
        zf.writestr("bitsandbytes-0.0.dist-info/RECORD", "stale\n")
    saved = wheelhouse.trim_bitsandbytes(wheel, "libbitsandbytes_cuda130.so")
    assert saved > 0
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        record = zf.read("bitsandbytes-0.0.dist-info/RECORD").decode().splitlines()
    assert [n for n in names if n.endswith(".so")] == ["bitsandbytes/libbitsandbytes_cuda130.so"]
    assert sorted(line.split(",")[0] for line in record) == sorted(names)
    assert all(line.endswith(",,") or ",sha256=" in line for line in record)


def test_each_difference_from_the_lock_is_one_line():
    locked = {"torch": "2.13.0+cpu", "transformers": "5.23.0", "accelerate": "1.15.0", "peft": "0.21.2"}
    found = {"torch": "2.11.0", "transformers": "5.17.0", "accelerate": "1.15.0", "peft": None}
    assert install.differences(found, locked) == [
        "torch: 2.11.0 on this box, 2.13.0+cpu in the lock",
        "transformers: 5.17.0 on this box, 5.23.0 in the lock",
        "peft: not installed on this box (the lock has 0.21.2)",
    ]
    assert install.differences({"torch": "2.13.0", **{k: locked[k] for k in list(locked)[1:]}}, locked) == []


def test_env_json_says_how_the_packages_were_installed(tmp_path):
    from bench.results.env import OFFLINE_STAMP, installation

    assert installation(tmp_path) == ("lock", [])
    stamp = {"wheelhouse": "/w", "base_python": "/opt/torch/.venv/bin/python3", "differences": ["torch: a, b"]}
    (tmp_path / OFFLINE_STAMP).write_text(json.dumps(stamp))
    assert installation(tmp_path) == ("wheelhouse /w over /opt/torch/.venv/bin/python3", ["torch: a, b"])
    assert Path(install.__file__).parent == OFFLINE and install.STAMP == OFFLINE_STAMP
