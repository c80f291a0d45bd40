"""A rank's RSS split by what backs it (bench/worker/memory.py rss_parts): read from the kernel, kept at the moments
the rank reads its baseline and its peaks, carried into the record's rank memory."""

import mmap

from bench.judge.metrics import rank_memory
from bench.results.schema import RssParts
from bench.worker import memory
from bench.worker.rank_report import RankReport

MiB = 2**20


def test_the_parts_of_one_status_read_sum_to_its_rss():
    text = memory.STATUS.read_text()
    parts = memory.parts_of(text)
    vm_rss = next(int(line.split()[1]) for line in text.splitlines() if line.startswith("VmRSS:"))
    assert parts is not None and parts.anon_bytes > 0 and parts.file_bytes > 0
    assert parts.anon_bytes + parts.file_bytes + parts.shmem_bytes == vm_rss * 1024


def test_a_kernel_that_does_not_split_rss_gives_no_parts():
    assert memory.parts_of("Name:\tpython\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n") is None


def test_touching_a_mapped_file_grows_the_page_cache_part_and_not_the_anonymous_one(tmp_path):
    data = tmp_path / "weights.bin"
    data.write_bytes(b"\1" * (16 * MiB))
    with data.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        before = memory.rss_parts()
        touched = sum(mapped[i] for i in range(0, len(mapped), mmap.PAGESIZE))
        after = memory.rss_parts()
    assert touched == 16 * MiB // mmap.PAGESIZE
    assert after.page_cache_bytes - before.page_cache_bytes >= 15 * MiB  # /tmp on a tmpfs counts it as shmem
    assert abs(after.anon_bytes - before.anon_bytes) < 4 * MiB


def test_writing_fresh_memory_grows_the_anonymous_part():
    before = memory.rss_parts()
    block = bytearray(32 * MiB)
    block[:: mmap.PAGESIZE] = b"\1" * len(block[:: mmap.PAGESIZE])
    after = memory.rss_parts()
    assert after.anon_bytes - before.anon_bytes >= 30 * MiB
    assert abs(after.page_cache_bytes - before.page_cache_bytes) < 4 * MiB


def test_the_record_keeps_each_ranks_parts_at_each_moment():
    parts = {
        moment: RssParts(anon_bytes=n * MiB, file_bytes=2 * n * MiB, shmem_bytes=0)
        for moment, n in (("baseline", 380), ("loaded", 410), ("trained", 440))
    }
    with_parts = RankReport(rank=0, pid=1, hostname="h", rss_parts=parts)
    older = RankReport(rank=1, pid=2, hostname="h")
    figures = rank_memory([with_parts, older], [])
    assert figures[0].rss_parts == parts and figures[1].rss_parts == {}
    assert figures[0].rss_parts["trained"].page_cache_bytes == 880 * MiB


def test_the_worker_keeps_the_split_under_the_moment_it_reads_it():
    from bench.worker.__main__ import _split_rss

    report = RankReport(rank=0, pid=1, hostname="h")
    _split_rss(report, "baseline")
    _split_rss(report, "trained")
    assert set(report.rss_parts) == {"baseline", "trained"}
    assert report.rss_parts["baseline"].anon_bytes > 0
