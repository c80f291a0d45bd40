"""Overlay venvs (bench/selfbench/overlay.py): the package specs, and a real overlay over this venv whose replaced
package is the one its interpreter imports and its metadata reports, with every launcher on its interpreter."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.errors import BenchError
from bench.launchers import LaunchInputs, launcher_spec
from bench.matrix.axes import Launcher
from bench.matrix.packages import installed_versions
from bench.results.env import installation
from bench.selfbench import overlay
from tests.unit.selfbench.fake_packages import checkout, wheel

PROBE = "dpo_bench_probe"
PROBE_DIST = "dpo-bench-probe"
"""Its distribution's canonical name, as the overlay names it."""


# ---------------------------------------------------------------- specs


def test_a_spec_is_a_pinned_requirement_or_a_local_checkout_or_wheel(tmp_path):
    pinned = overlay.parse_package("TRL==1.15.0", "--base-with")
    assert (pinned.name, pinned.install, pinned.local) == ("trl", "TRL==1.15.0", False)
    assert pinned.requirement.specifier.contains("1.15.0")
    assert overlay.parse_package("peft>=0.13,<0.14", "--head-with").name == "peft"
    folder = checkout(tmp_path / "trl", "trl", "9.0.0")
    local = overlay.parse_package(f"trl={folder}", "--head-with")
    assert (local.name, local.install, local.local, local.requirement) == ("trl", str(folder), True, None)
    built = wheel(tmp_path / "w", "trl", "9.0.0")
    assert overlay.parse_package(f"trl={built}", "--head-with").install == str(built)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("trl", r"--base-with trl: name a version \(trl==1.2.3\) or a checkout \(trl=/path/to/trl\)"),
        ("trl=/no/such/folder", "--base-with trl=/no/such/folder: /no/such/folder is neither a package folder"),
        ("==1.0", r"--base-with '==1.0': use NAME==VERSION \(a pip requirement\) or NAME=PATH"),
    ],
)
def test_a_bad_spec_is_one_line_naming_the_flag(text, message):
    with pytest.raises(BenchError, match=message):
        overlay.parse_package(text, "--base-with")


def test_a_package_named_twice_on_one_side_is_refused():
    with pytest.raises(BenchError, match="--head-with: trl named more than once"):
        overlay.parse_packages(["trl==1.15.0", "TRL==1.16.0"], "--head-with")
    assert overlay.parse_packages(None, "--head-with") == ()


def test_only_a_checkout_builds_without_isolation_and_nothing_is_uninstalled(tmp_path):
    pinned = overlay.parse_package("trl==1.15.0", "--base-with")
    argv = overlay.pip_argv("/o/bin/python", [pinned])
    assert argv[:4] == ["/o/bin/python", "-m", "pip", "install"] and argv[-1] == "trl==1.15.0"
    assert {"--no-deps", "--ignore-installed"} <= set(argv) and "--no-build-isolation" not in argv
    local = overlay.parse_package(f"trl={checkout(tmp_path / 't', 'trl', '9.0.0')}", "--base-with")
    assert "--no-build-isolation" in overlay.pip_argv("/o/bin/python", [pinned, local])


# ---------------------------------------------------------------- a real overlay


def ask(python: str, code: str) -> dict:
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


SEEN = """
import json, importlib.metadata as m, trl, peft, dpo_bench_probe
print(json.dumps({"trl": [trl.__version__, trl.__file__, m.version("trl")], "peft": [peft.__file__, m.version("peft")],
                  "probe": [dpo_bench_probe.__file__, m.version("dpo_bench_probe")]}))
"""


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> overlay.Overlay:
    """An overlay of a wheel that replaces trl (version 0.0.1) and of a local checkout of a new package."""
    root = tmp_path_factory.mktemp("overlays")
    specs = [
        overlay.parse_package(f"trl={wheel(root / 'wheels', 'trl', '0.0.1')}", "--head-with"),
        overlay.parse_package(f"{PROBE}={checkout(root / 'probe', PROBE, '2.0.0')}", "--head-with"),
    ]
    return overlay.overlay_for(specs, root=root / "built", say=lambda line: None)


def test_the_overlays_interpreter_imports_and_reports_its_own_copy_first_and_this_venvs_for_the_rest(made):
    seen = ask(made.python, SEEN)
    own = overlay.site_packages(made.prefix)
    assert seen["trl"][0] == "0.0.1" and seen["trl"][2] == "0.0.1" and Path(seen["trl"][1]).is_relative_to(own)
    assert Path(seen["probe"][0]).is_relative_to(own) and seen["probe"][1] == "2.0.0"
    assert not Path(seen["peft"][0]).is_relative_to(made.prefix) and seen["peft"][1] == installed_versions()["peft"]
    assert made.versions == {"trl": "0.0.1", PROBE_DIST: "2.0.0"} and made.label == f"trl 0.0.1, {PROBE_DIST} 2.0.0"
    assert installed_versions(("trl",))["trl"] != "0.0.1"  # this venv is untouched


def test_env_json_says_what_the_overlay_replaced_over_which_venv(made):
    where, differences = installation(made.prefix)
    base_where, base_differences = installation(Path(sys.prefix))
    assert where.startswith("overlay trl=") and where.endswith(f" over {base_where}")
    assert differences == [
        *base_differences,
        f"trl 0.0.1 (over {installed_versions()['trl']})",
        f"{PROBE_DIST} 2.0.0 (over None)",
    ]


def test_every_launcher_runs_the_overlays_interpreter(made):
    worker = ("-m", "bench.worker", "spec.json")
    inputs = LaunchInputs(python=made.python, processes=2, port=29500, worker=worker, accelerate_config="a.yaml")
    for launcher in (Launcher.TORCHRUN, Launcher.ACCELERATE, Launcher.DEEPSPEED):
        argv = launcher_spec(launcher).command(inputs, made.python)
        assert argv[:2] == [made.python, "-m"], launcher  # no script of theirs beside it: `python -m <module>`
    mpirun = launcher_spec(Launcher.MPIRUN).command(inputs, made.python)
    if (Path(sys.prefix) / "bin" / "mpirun").exists():
        assert mpirun[0] == str(Path(made.python).parent / "mpirun") and made.python in mpirun
    single = launcher_spec(Launcher.PYTHON).command(
        LaunchInputs(python=made.python, processes=1, port=0, worker=("-m", "bench.worker", "s")), made.python
    )
    assert single[0] == made.python


def test_a_released_versions_overlay_is_reused_and_a_checkouts_made_again(made, tmp_path):
    local = made.packages
    again = overlay.overlay_for(local, root=made.prefix.parent, say=lambda line: None)
    assert again.prefix == made.prefix and again.versions == made.versions
    stamp = json.loads((made.prefix / overlay.OVERLAY_STAMP).read_text())
    assert stamp["packages"] == [s.text for s in local] and stamp["versions"] == made.versions


def test_a_package_pip_cannot_install_is_one_line_with_its_log(tmp_path):
    broken = checkout(tmp_path / "broken", "broken_pkg", "1.0")
    (broken / "pyproject.toml").write_text("[build-system]\nrequires = []\nbuild-backend = 'no.such.backend'\n")
    spec = overlay.parse_package(f"broken_pkg={broken}", "--base-with")
    with pytest.raises(BenchError, match=r"overlay: pip could not install broken_pkg=.*\(.*pip\.log\)"):
        overlay.overlay_for([spec], root=tmp_path / "o", say=lambda line: None)
