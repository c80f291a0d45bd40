"""What the kernel and the filesystems do to a CPU cell's RSS on the same code (env.json `memory_settings`).

A rank's RSS counts every page-cache page it has mapped: the shared libraries' code and data it touched, the mapped
checkpoint. How many pages one touch maps is the machine's: the kernel maps the whole folio around a faulting page
and its fault-around window of cached neighbours, and a file's page-cache folios are as large as its filesystem
(tmpfs `huge=`; ext4 and xfs make large folios), the writes that made it and the readahead that read it in allow.
Anonymous memory is rounded up by transparent huge pages where they are on (per size since Linux 6.8). What this
moves, measured: docs/metrics.md, "What RSS counts of the page cache". Every read here is a sysfs or /proc file;
what is missing is left out, never guessed.
"""

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict

THP = Path("/sys/kernel/mm/transparent_hugepage")
MOUNTINFO = Path("/proc/self/mountinfo")
FAULT_AROUND = Path("/sys/kernel/debug/fault_around_bytes")


class Filesystem(BaseModel):
    """The filesystem a folder lives on: what decides the folio sizes of its files in the page cache."""

    model_config = ConfigDict(extra="allow")

    path: str
    fstype: str | None = None
    """`ext4`, `xfs`, `tmpfs`, `overlay`, ... (/proc/self/mountinfo)."""
    options: str | None = None
    """Its superblock options (tmpfs: `huge=`)."""
    read_ahead_kb: int | None = None
    """Its block device's readahead window, which bounds the folios a read makes; None without a block device."""


class MemorySettings(BaseModel):
    model_config = ConfigDict(extra="allow")

    thp_enabled: str | None = None
    """/sys/kernel/mm/transparent_hugepage/enabled: the mode in effect (`always`, `madvise`, `never`)."""
    thp_defrag: str | None = None
    thp_shmem_enabled: str | None = None
    thp_sizes: dict[str, str] = {}
    """Anonymous multi-size THP: each hugepages-<size>/enabled that is not `never` (`inherit` follows thp_enabled)."""
    shmem_thp_sizes: dict[str, str] = {}
    """The same for shmem and tmpfs (hugepages-<size>/shmem_enabled)."""
    fault_around_bytes: int | None = None
    """How much of a file's cached neighbourhood one fault maps (debugfs; None where it cannot be read)."""
    filesystems: dict[str, Filesystem] = {}
    """`libraries` (torch's shared libraries, the local venv only), `checkout`, `assets` (the model and dataset)."""

    def facts(self) -> dict[str, str]:
        """What compare holds equal between two runs, as shown to people."""
        sizes = " ".join(f"{k}={v}" for k, v in sorted(self.thp_sizes.items())) or "none"
        shmem_sizes = " ".join(f"{k}={v}" for k, v in sorted(self.shmem_thp_sizes.items())) or "none"
        facts = {
            "transparent huge pages": f"{self.thp_enabled} (defrag {self.thp_defrag}; sizes {sizes})",
            "shmem huge pages": f"{self.thp_shmem_enabled} (sizes {shmem_sizes})",
        }
        for name, fs in sorted(self.filesystems.items()):
            readahead = "no block device" if fs.read_ahead_kb is None else f"readahead {fs.read_ahead_kb} KiB"
            facts[f"filesystem of the {name}"] = f"{fs.fstype} ({fs.options}; {readahead})"
        return facts


def selected(text: str) -> str | None:
    """The bracketed choice of a sysfs selector (`always [madvise] never` -> `madvise`); None where none is."""
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _selected_at(path: Path) -> str | None:
    text = _read(path)
    return None if text is None else selected(text)


def thp_sizes(thp: Path, knob: str) -> dict[str, str]:
    """`knob` (`enabled`, `shmem_enabled`) of every hugepages-<size> folder that is not `never`."""
    sizes = {}
    for folder in sorted(thp.glob("hugepages-*")):
        choice = _selected_at(folder / knob)
        if choice not in (None, "never"):
            sizes[folder.name.removeprefix("hugepages-")] = choice
    return sizes


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (`\\040`)."""
    return field.encode().decode("unicode_escape") if "\\" in field else field


def mount_of(path: Path, mountinfo: str) -> tuple[str, str, str, str] | None:
    """(device major:minor, fstype, superblock options, mount point) of the mount holding `path` (already resolved):
    the longest mount point that contains it, the last mounted of equals."""
    best: tuple[str, str, str, str] | None = None
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields or len(fields) < 5:
            continue
        tail = fields[fields.index("-") + 1 :]
        point = _unescape(fields[4])
        if not path.is_relative_to(point) or len(tail) < 3:
            continue
        if best is None or len(point) >= len(best[3]):
            best = (fields[2], tail[0], tail[2], point)
    return best


def read_ahead_kb(device: str, sys_dev_block: Path = Path("/sys/dev/block")) -> int | None:
    """The readahead window of block device `major:minor`, or of the disk a partition is on; None for a filesystem
    with no block device (tmpfs, overlay)."""
    folder = sys_dev_block / device
    for queue in (folder / "queue", folder / ".." / "queue"):
        text = _read(queue / "read_ahead_kb")
        if text is not None and text.isdigit():
            return int(text)
    return None


def filesystem(path: Path, mountinfo: str | None, shown: str) -> Filesystem:
    """The filesystem `path` is on, or will be on once made (its nearest existing folder's); `shown`: the path as
    env.json names it."""
    existing = path.resolve()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    found = mount_of(existing, mountinfo) if mountinfo else None
    if found is None:
        return Filesystem(path=shown)
    device, fstype, options, _ = found
    return Filesystem(path=shown, fstype=fstype, options=options, read_ahead_kb=read_ahead_kb(device))


def _shown(folder: Path, root: Path | None) -> str:
    absolute = Path(os.path.abspath(folder))
    return str(absolute.relative_to(root)) if root is not None and absolute.is_relative_to(root) else str(absolute)


def detect_memory_settings(folders: dict[str, Path], root: Path | None = None, thp: Path = THP) -> MemorySettings:
    """The kernel's memory settings and the filesystems of `folders` (name -> folder) on this machine; a folder
    under `root` is named relative to it."""
    mountinfo = _read(MOUNTINFO)
    fault_around = _read(FAULT_AROUND)
    return MemorySettings(
        thp_enabled=_selected_at(thp / "enabled"),
        thp_defrag=_selected_at(thp / "defrag"),
        thp_shmem_enabled=_selected_at(thp / "shmem_enabled"),
        thp_sizes=thp_sizes(thp, "enabled"),
        shmem_thp_sizes=thp_sizes(thp, "shmem_enabled"),
        fault_around_bytes=int(fault_around) if fault_around and fault_around.isdigit() else None,
        filesystems={name: filesystem(folder, mountinfo, _shown(folder, root)) for name, folder in folders.items()},
    )
