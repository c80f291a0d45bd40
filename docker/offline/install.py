"""`make setup WHEELHOUSE=<dir>`: install the suite with no network over what a GPU box already has.

- A venv that sees the packages of the Python running this (the box's own torch, transformers, accelerate, peft):
  created with --system-site-packages, plus a .pth naming that Python's site-packages folders, because on boxes
  whose `python3` is itself a venv (NGC images, /opt/*/.venv) --system-site-packages alone reaches only the base
  interpreter's, not the packages.
- `pip install --no-index --find-links <dir>` of docker/offline/packages.txt's [install] packages at the lock's
  versions; pip takes their other requirements from what the box has, or the wheelhouse's fallbacks where the box's
  version is outside a requirement.
- The project itself through a .pth (nothing to build), as `pip install -e .` would place it.
- One line for each of torch, transformers, accelerate and peft whose version differs from the lock; the record of
  what was installed (`<venv>/.installed-offline`, JSON) for env.json.

Standard library only. Usage:
    python3 docker/offline/install.py --wheelhouse DIR [--venv .venv] [--flavor cuda|cpu]
"""

import argparse
import json
import site
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
from wheelhouse import canonical, lock_versions, pinned, sections  # noqa: E402

COMPARED = ("torch", "transformers", "accelerate", "peft")
"""The packages the box brings whose version the lock also pins: each difference gets a line."""
STAMP = ".installed-offline"


def base_site_dirs() -> list[str]:
    """This interpreter's site-packages folders (its venv's where it runs in one)."""
    dirs = [*site.getsitepackages(), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    return list(dict.fromkeys(d for d in dirs if Path(d).is_dir()))


def venv_python(target: Path) -> Path:
    return target / "bin" / "python"


def make_venv(target: Path) -> Path:
    venv.EnvBuilder(system_site_packages=True, with_pip=False, clear=False, symlinks=True).create(target)
    python = venv_python(target)
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(purelib, "_box_site.pth").write_text("".join(f"{d}\n" for d in base_site_dirs()), encoding="utf-8")
    Path(purelib, "_dpo_bench.pth").write_text(f"{ROOT}\n", encoding="utf-8")
    return python


def installed(python: Path, names: tuple[str, ...]) -> dict[str, str | None]:
    code = (
        "import json, importlib.metadata as m\n"
        "def v(n):\n"
        "    try: return m.version(n)\n"
        "    except m.PackageNotFoundError: return None\n"
        f"print(json.dumps({{n: v(n) for n in {list(names)!r}}}))"
    )
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def differences(found: dict[str, str | None], locked: dict[str, str]) -> list[str]:
    """Pure: one line per compared package whose installed version is not the lock's."""
    lines = []
    for name in COMPARED:
        want = locked.get(canonical(name))
        have = found.get(name)
        if have is None:
            lines.append(f"{name}: not installed on this box (the lock has {want})")
        elif want is not None and have.split("+")[0] != want.split("+")[0]:
            lines.append(f"{name}: {have} on this box, {want} in the lock")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheelhouse", required=True, type=Path)
    parser.add_argument("--venv", default=ROOT / ".venv", type=Path)
    parser.add_argument("--flavor", choices=("cuda", "cpu"), default="cuda")
    args = parser.parse_args(argv)
    if not any(args.wheelhouse.glob("*.whl")):
        print(
            f"error: {args.wheelhouse}: no wheels (make wheelhouse WHEELHOUSE={args.wheelhouse} on a connected "
            "machine first)",
            file=sys.stderr,
        )
        return 2
    lock = ROOT / "docker" / args.flavor / "requirements.lock"
    locked = lock_versions(lock)
    python = make_venv(args.venv)
    requirements = pinned(sections()["install"], locked, lock)
    pip = [
        str(python),
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-index",
        "--find-links",
        str(args.wheelhouse),
        "--no-warn-script-location",
        "--disable-pip-version-check",
    ]
    done = subprocess.run([*pip, *requirements], check=False)
    if done.returncode != 0:
        print(
            f"error: pip could not install {lock.name}'s versions from {args.wheelhouse} over this box's packages "
            "(its message above names the requirement)",
            file=sys.stderr,
        )
        return done.returncode
    found = installed(python, COMPARED + tuple(sections()["install"]))
    for line in differences(found, locked):
        print(f"notice: {line}")
    record = {
        "wheelhouse": str(args.wheelhouse.resolve()),
        "base_python": sys.executable,
        "base_site_packages": base_site_dirs(),
        "lock": str(lock.relative_to(ROOT)),
        "versions": found,
        "differences": differences(found, locked),
    }
    (args.venv / STAMP).write_text(json.dumps(record, indent=2), encoding="utf-8")
    print(f"installed {len(requirements)} packages from {args.wheelhouse} into {args.venv} over {sys.executable}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
