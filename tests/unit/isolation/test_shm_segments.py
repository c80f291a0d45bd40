import os

from bench.isolation.shm_segments import remove_group_segments, remove_segments, segments


def test_only_the_segments_of_that_address_port_and_user_are_removed(tmp_path):
    names = [
        "deepspeed_allreduce_buffer_0_127.0.0.1_29500_0",
        "deepspeed_allreduce_buffer_0_127.0.0.1_29500_1",
        "deepspeed_allreduce_buffer_0_127.0.0.1_295001_0",  # another port with the same prefix
        "deepspeed_allreduce_buffer_0_127.0.0.1_29501_0",
        "deepspeed_allreduce_buffer_1000_127.0.0.1_29500_0",  # another user
        "deepspeed_allreduce_buffer_0_127.0.0.1_29500_x",
        "something_else",
    ]
    for name in names:
        (tmp_path / name).write_bytes(b"x")
    assert [p.name for p in segments("127.0.0.1", 29500, uid=0, shm_dir=tmp_path)] == names[:2]
    assert remove_segments("127.0.0.1", "29500", uid=0, shm_dir=tmp_path) == names[:2]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[2:])
    assert remove_segments("127.0.0.1", "29500", uid=0, shm_dir=tmp_path) == []


def test_no_shm_folder_is_nothing_to_remove(tmp_path):
    assert remove_segments("127.0.0.1", 1, shm_dir=tmp_path / "absent") == []


def test_the_group_is_the_one_the_environment_rendezvouses_at(tmp_path):
    mine = tmp_path / f"deepspeed_allreduce_buffer_{os.getuid()}_127.0.0.1_29500_0"
    mine.write_bytes(b"x")
    assert remove_group_segments({"MASTER_ADDR": "127.0.0.1"}, shm_dir=tmp_path) == []
    assert remove_group_segments({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}, shm_dir=tmp_path) == [mine.name]
