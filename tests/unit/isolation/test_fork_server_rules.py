"""What the fork server may serve: the interpreter's command line, the environment, sys.path (pure)."""

import json

import pytest

from bench.isolation.fork_server_rules import Program, child_path, env_differences, first_entry, program, shadowing


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["-u", "-m", "bench.worker", "spec.json"], Program("module", "bench.worker", ("spec.json",), unbuffered=True)),
        (["-mbench.worker", "a"], Program("module", "bench.worker", ("a",))),
        (["-uB", "-c", "print(1)", "x"], Program("code", "print(1)", ("x",), True, True)),
        (["/venv/bin/deepspeed", "--num_gpus", "2"], Program("script", "/venv/bin/deepspeed", ("--num_gpus", "2"))),
        (["script.py", "-u"], Program("script", "script.py", ("-u",))),
    ],
)
def test_the_programs_a_child_can_become(argv, expected):
    assert program(argv) == expected


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (["-X", "importtime", "-c", "1"], "python option -X"),
        (["-I", "script.py"], "python option -I"),
        (["-uO", "-m", "x"], "python option -O"),
        ([], "no program"),
        (["-u"], "no program"),
        (["-"], "standard input"),
        (["-m"], "-m without its argument"),
    ],
)
def test_what_a_child_cannot_take_on_is_refused_with_a_reason(argv, why):
    answer = program(argv)
    assert isinstance(answer, str) and why in answer


def test_only_variables_read_at_run_time_may_differ():
    server = {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PATH": "/bin"}
    request = {
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "4",
        "PATH": "/bin",
        "RANK": "1",
        "MASTER_PORT": "29500",
        "TORCHELASTIC_RUN_ID": "x",
        "ACCELERATE_USE_DEEPSPEED": "true",
        "OMPI_COMM_WORLD_RANK": "1",
        "BENCH_CELL_TOKEN": "t",
    }
    assert env_differences(server, request) == []
    assert env_differences(server, request | {"HF_HUB_OFFLINE": "0"}) == ["HF_HUB_OFFLINE"]
    assert env_differences(server, request | {"LD_LIBRARY_PATH": "/opt/mpi"}) == ["LD_LIBRARY_PATH"]
    assert env_differences(server, {k: v for k, v in request.items() if k != "PATH"}) == ["PATH"]


def test_a_variable_the_servers_imports_set_may_come_back_with_the_same_value():
    imported = {"TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor_root"}
    request = {"TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor_root"}
    assert env_differences({}, request, imported) == []
    assert env_differences({}, {"TORCHINDUCTOR_CACHE_DIR": "/elsewhere"}, imported) == ["TORCHINDUCTOR_CACHE_DIR"]


def test_the_first_path_entry_is_the_scripts_folder_else_the_working_directory(tmp_path):
    assert first_entry("script", "bin/tool", str(tmp_path)) == str(tmp_path / "bin")
    assert first_entry("module", "bench.worker", str(tmp_path)) == str(tmp_path)


def test_a_path_entry_that_would_import_an_imported_module_from_another_file_is_refused(tmp_path):
    (tmp_path / "json.py").write_text("")
    imported = {"json": json.__file__}
    assert "holds json" in shadowing([str(tmp_path)], imported, str(tmp_path))
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    assert shadowing(["pkg"], {"pkg": str(package / "__init__.py")}, str(tmp_path)) is None  # the same file
    assert shadowing([str(tmp_path / "missing")], imported, str(tmp_path)) is None


def test_the_childs_path_replaces_the_servers_own_first_entry_and_pythonpath():
    server = ["/project", "/extra", "/usr/lib/python3.11", "/venv/site-packages"]
    assert child_path("/cwd", ["/mine"], server, ["/extra"]) == [
        "/cwd",
        "/mine",
        "/usr/lib/python3.11",
        "/venv/site-packages",
    ]
    assert child_path("/project", [], server, []) == ["/project", "/extra", *server[2:]]
