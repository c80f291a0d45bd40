"""The packages whose versions a run records and a recipe may constrain, and the versions installed here."""

from importlib import metadata

PACKAGES = ("torch", "transformers", "trl", "peft", "accelerate", "deepspeed", "bitsandbytes", "datasets", "pandas")


def installed_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Each package's installed version, None where it is not installed."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions
