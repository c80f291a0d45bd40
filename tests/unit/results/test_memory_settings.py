"""env.json `memory_settings` (bench/results/memory_settings.py): the huge-page settings and the filesystems that decide how
many page-cache pages a rank's RSS counts, read from sysfs and /proc, and named by compare when two runs differ."""

from pathlib import Path

from bench.paths import PROJECT_ROOT
from bench.report.compare import comparability
from bench.results import memory_settings
from bench.results.env_schema import EnvFingerprint
from bench.results.memory_settings import Filesystem, MemorySettings

MOUNTINFO = """\
22 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
30 22 0:26 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=100k
41 22 0:40 / /mnt/my\\040folder rw,relatime - tmpfs tmpfs rw,size=8388608k,huge=always
42 22 7:1 / /mnt/data rw,relatime shared:3 - xfs /dev/loop1 rw,inode64
43 42 7:2 / /mnt/data rw,relatime - ext4 /dev/loop2 rw
"""


def test_the_bracketed_choice_is_the_setting_in_effect():
    assert memory_settings.selected("always [madvise] never") == "madvise"
    assert memory_settings.selected("always within_size advise [never] deny force") == "never"
    assert memory_settings.selected("no brackets") is None


def test_a_path_is_on_the_longest_mount_that_holds_it_the_last_mounted_of_equals():
    assert memory_settings.mount_of(Path("/work/x"), MOUNTINFO) == ("254:0", "ext4", "rw,discard", "/")
    assert memory_settings.mount_of(Path("/mnt/my folder/venv"), MOUNTINFO)[1:3] == (
        "tmpfs",
        "rw,size=8388608k,huge=always",
    )
    assert memory_settings.mount_of(Path("/mnt/data/a"), MOUNTINFO)[:2] == ("7:2", "ext4")  # mounted over the xfs
    assert memory_settings.mount_of(Path("/mnt/database"), MOUNTINFO)[1] == "ext4"  # not under /mnt/data: the root's


def test_the_readahead_is_the_devices_or_its_disks_for_a_partition(tmp_path):
    (tmp_path / "8:0" / "queue").mkdir(parents=True)
    (tmp_path / "8:0" / "queue" / "read_ahead_kb").write_text("8192\n")
    (tmp_path / "8:0" / "8:1").mkdir()
    (tmp_path / "8:1").symlink_to(tmp_path / "8:0" / "8:1")  # sysfs: a partition's folder sits in its disk's
    assert memory_settings.read_ahead_kb("8:0", tmp_path) == 8192
    assert memory_settings.read_ahead_kb("8:1", tmp_path) == 8192
    assert memory_settings.read_ahead_kb("0:40", tmp_path) is None  # a tmpfs has no block device


def test_each_huge_page_size_that_is_not_never_is_kept(tmp_path):
    for size, enabled, shmem in (("16kB", "always [never]", None), ("64kB", "[always] never", "[advise] never")):
        folder = tmp_path / f"hugepages-{size}"
        folder.mkdir()
        (folder / "enabled").write_text(enabled)
        if shmem:
            (folder / "shmem_enabled").write_text(shmem)
    (tmp_path / "enabled").write_text("always [madvise] never")
    found = memory_settings.detect_memory_settings({}, thp=tmp_path)
    assert found.thp_enabled == "madvise" and found.thp_defrag is None
    assert found.thp_sizes == {"64kB": "always"} and found.shmem_thp_sizes == {"64kB": "advise"}


def test_this_machine_names_the_filesystem_of_the_checkout_and_of_assets_not_built_yet():
    found = memory_settings.detect_memory_settings(
        {"checkout": PROJECT_ROOT, "assets": PROJECT_ROOT / "build" / "not-built-yet"}, PROJECT_ROOT
    )
    checkout, assets = found.filesystems["checkout"], found.filesystems["assets"]
    assert checkout.path == "." and assets.path == "build/not-built-yet"
    assert checkout.fstype and assets.fstype == checkout.fstype  # the folder it will be made in


def test_compare_names_a_run_whose_libraries_were_on_another_filesystem():
    def env(fs: Filesystem) -> EnvFingerprint:
        memory = MemorySettings(thp_enabled="madvise", filesystems={"libraries": fs})
        return EnvFingerprint(hardware_profile="cpu", memory_settings=memory)

    ext4 = Filesystem(path=".venv", fstype="ext4", options="rw", read_ahead_kb=8192)
    tmpfs = Filesystem(path=".venv", fstype="tmpfs", options="rw,huge=always")
    assert comparability(env(ext4), env(ext4)) == []
    assert comparability(env(ext4), env(tmpfs)) == [
        "filesystem of the libraries: ext4 (rw; readahead 8192 KiB) → tmpfs (rw,huge=always; no block device)"
    ]
    docker = EnvFingerprint(hardware_profile="cpu", memory_settings=MemorySettings(thp_enabled="madvise"))
    assert comparability(env(ext4), docker) == [
        "filesystem of the libraries: ext4 (rw; readahead 8192 KiB) → not recorded"
    ]
