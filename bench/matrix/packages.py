"""The packages whose versions a run records and a recipe may constrain, and the versions installed here."""

import importlib
import importlib.util
from importlib import metadata

PACKAGES = ("torch", "transformers", "trl", "peft", "accelerate", "deepspeed", "bitsandbytes", "datasets", "pandas")


def installed_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Each package's installed version, None where it is not installed. Its distribution's metadata first; where a
    package is importable without one (copied in without its dist-info), the module's own `__version__`, so that a
    recipe's version range is not refused for a package that is there."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = module_version(name)
    return versions


def module_version(name: str) -> str | None:
    module = name.replace("-", "_")
    if importlib.util.find_spec(module) is None:
        return None
    version = getattr(importlib.import_module(module), "__version__", None)
    return str(version) if version else None
