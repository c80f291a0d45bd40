"""`make wheelhouse WHEELHOUSE=<dir>`: on a connected machine, the wheels a GPU box without internet needs beyond
its own torch, transformers, accelerate and peft (docker/offline/packages.txt), for its Python and CUDA.

- Each `[install]` and `[fallback]` package at the lock's version, as a binary wheel for the target Python and
  platform (`pip download --only-binary`).
- DeepSpeed has no wheel on PyPI: built here from its source distribution (`pip wheel`, pure Python; its ops are
  built on the box, by `make setup`/the run, before any timed cell).
- bitsandbytes ships one native library per CUDA release (~43 MB): the wheel keeps only the box's
  (`libbitsandbytes_cuda<CUDA>.so`, ~4 MB; `libbitsandbytes_cpu.so` for a CPU box), its RECORD rewritten to match.

Standard library only: it runs before anything is installed. Usage:
    python docker/offline/wheelhouse.py --out DIR [--flavor cuda|cpu] [--python 3.12] [--cuda 130]
"""

import argparse
import base64
import hashlib
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
    "linux_x86_64",
)
BUILT = ("deepspeed",)
"""Packages with no wheel on PyPI: built here from source."""


def sections(path: Path = HERE / "packages.txt") -> dict[str, list[str]]:
    """packages.txt's sections: name -> package names (comments and blank lines dropped)."""
    found: dict[str, list[str]] = {}
    current = None
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            current = found.setdefault(line[1:-1], [])
        elif current is None:
            raise SystemExit(f"{path}: {line!r} is outside a [section]")
        else:
            current.append(line)
    return found


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_versions(lock: Path) -> dict[str, str]:
    """name -> version of every `name==version` line of a lock file (local version labels kept)."""
    versions = {}
    for raw in lock.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            versions[canonical(name)] = version.strip()
    return versions


def pinned(names: list[str], versions: dict[str, str], lock: Path) -> list[str]:
    missing = [n for n in names if canonical(n) not in versions]
    if missing:
        raise SystemExit(f"{lock}: no version for {', '.join(missing)} (docker/offline/packages.txt names them)")
    return [f"{n}=={versions[canonical(n)]}" for n in names]


def download(requirements: list[str], out: Path, python: str) -> None:
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            python,
            "--implementation",
            "cp",
            *platforms,
            "--dest",
            str(out),
            *requirements,
        ],
        check=True,
    )


def build(requirements: list[str], out: Path) -> None:
    """Pure-Python wheels built from source with this interpreter (DeepSpeed's setup.py imports torch)."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(out),
            *requirements,
        ],
        check=True,
    )


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def trim_bitsandbytes(wheel: Path, keep: str) -> int:
    """Drop every native library but `keep` from a bitsandbytes wheel, in place; the bytes saved."""
    before = wheel.stat().st_size
    with zipfile.ZipFile(wheel) as source:
        names = source.namelist()
        libraries = [n for n in names if re.fullmatch(r"bitsandbytes/libbitsandbytes_[a-z0-9]+\.so", n)]
        if f"bitsandbytes/{keep}" not in libraries:
            raise SystemExit(f"{wheel.name} has no {keep}; it has {', '.join(Path(n).name for n in libraries)}")
        dropped = set(libraries) - {f"bitsandbytes/{keep}"}
        kept = {n: source.read(n) for n in names if n not in dropped}
    record = next(n for n in kept if n.endswith(".dist-info/RECORD"))
    lines = [record_line(n, data) for n, data in kept.items() if n != record] + [f"{record},,"]
    kept[record] = ("\n".join(lines) + "\n").encode()
    with tempfile.NamedTemporaryFile(dir=wheel.parent, suffix=".whl", delete=False) as handle:
        temporary = Path(handle.name)
    with zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as target:
        for name, data in kept.items():
            target.writestr(name, data)
    temporary.chmod(0o644)
    temporary.replace(wheel)
    return before - wheel.stat().st_size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--flavor", choices=("cuda", "cpu"), default="cuda", help="the lock whose versions to take")
    parser.add_argument("--python", default="3.12", help="the box's Python, MAJOR.MINOR (default: %(default)s)")
    parser.add_argument("--cuda", default="130", help="the box's CUDA release without the dot (default: %(default)s)")
    args = parser.parse_args(argv)

    lock = ROOT / "docker" / args.flavor / "requirements.lock"
    versions = lock_versions(lock)
    wanted = sections()
    names = wanted["install"] + wanted.get("fallback", [])
    built = [n for n in names if canonical(n) in BUILT]
    args.out.mkdir(parents=True, exist_ok=True)
    download(pinned([n for n in names if n not in built], versions, lock), args.out, args.python)
    if built:
        build(pinned(built, versions, lock), args.out)
    keep = "libbitsandbytes_cpu.so" if args.flavor == "cpu" else f"libbitsandbytes_cuda{args.cuda}.so"
    for wheel in args.out.glob("bitsandbytes-*.whl"):
        saved = trim_bitsandbytes(wheel, keep)
        print(f"{wheel.name}: kept {keep}, {saved / 2**20:.0f} MiB of other native libraries dropped")
    wheels = sorted(args.out.glob("*.whl"))
    total = sum(w.stat().st_size for w in wheels)
    print(
        f"wheelhouse {args.out}: {len(wheels)} wheels, {total / 1e6:.1f} MB (Python {args.python}, {args.flavor}"
        f"{'' if args.flavor == 'cpu' else ' ' + args.cuda})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
