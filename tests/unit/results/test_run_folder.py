"""A run folder made by a runner that recorded nothing is removed at its end (bench/results/run_folder.py)."""

from bench.results.layout import ENV_FILE, FORK_SERVER_LOG, HOST_OPS_LOG
from bench.results.run_folder import open_run


def test_a_run_stopped_before_its_first_cell_leaves_no_folder(tmp_path):
    run_dir = tmp_path / "cpu" / "stopped"
    with open_run(tmp_path, run_dir):
        for name in (ENV_FILE, FORK_SERVER_LOG, HOST_OPS_LOG):
            (run_dir / name).parent.mkdir(parents=True, exist_ok=True)
            (run_dir / name).write_text("x", encoding="utf-8")
    assert not (tmp_path / "cpu").exists()


def test_a_run_with_a_cells_log_keeps_its_folder(tmp_path):
    run_dir = tmp_path / "cpu" / "ran"
    with open_run(tmp_path, run_dir):
        (run_dir / FORK_SERVER_LOG).parent.mkdir(parents=True)
        (run_dir / FORK_SERVER_LOG).write_text("x", encoding="utf-8")
        (run_dir / "logs" / "one_adapter-none-single.log").write_text("x", encoding="utf-8")
    assert (run_dir / "logs" / "one_adapter-none-single.log").is_file() and (run_dir / FORK_SERVER_LOG).is_file()
