"""Packages made on the spot for the overlay tests: a local checkout (a setuptools project a git repository can
hold) and a wheel, built without the network."""

import base64
import hashlib
import zipfile
from pathlib import Path


def checkout(root: Path, name: str, version: str, body: str = "") -> Path:
    """A setuptools project of one module `name` whose `__version__` is `version`."""
    (root / name).mkdir(parents=True, exist_ok=True)
    (root / name / "__init__.py").write_text(f'__version__ = "{version}"\n{body}', encoding="utf-8")
    (root / "pyproject.toml").write_text(
        "\n".join(
            [
                "[build-system]",
                'requires = ["setuptools"]',
                'build-backend = "setuptools.build_meta"',
                "[project]",
                f'name = "{name}"',
                f'version = "{version}"',
                "[tool.setuptools]",
                f'packages = ["{name}"]',
                "",
            ]
        ),
        encoding="utf-8",
    )
    return root


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def wheel(folder: Path, name: str, version: str, body: str = "") -> Path:
    """A pure-Python wheel of one module `name` (the wheel format: files, METADATA, WHEEL, RECORD)."""
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f'__version__ = "{version}"\n{body}'.encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [_record_line(path, data) for path, data in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name_in, data in files.items():
            archive.writestr(name_in, data)
    return path
