"""`list` takes `run`'s target flags, so a run's command line with `list` in place of `run` shows which cells that
run would start and why the others do not apply."""

import pytest

from bench.cli import main


def _listed(capsys, argv: list[str]) -> str:
    assert main(["list", *argv]) == 0
    return capsys.readouterr().out


def test_a_catalog_target_is_listed_on_its_own_profile(capsys):
    out = _listed(capsys, ["--gpu", "A10:2", "--filter", "two_models-none-ddp"])
    assert out.splitlines()[-1] == "1 cells: 1 to run, 0 not applicable on gpu-A10x2"
    assert "two_models-none-ddp  run  torchrun x2" in out


def test_the_default_profile_is_cpu(capsys):
    assert _listed(capsys, ["--filter", "two_models-none-single"]).endswith("not applicable on cpu\n")


def test_a_run_command_line_is_a_list_command_line(capsys):
    """Settings flags are accepted (they decide no applicability rule) and an unknown profile is one line."""
    out = _listed(capsys, ["--hw", "1xA10", "--max-length", "512", "--attention", "sdpa", "--filter", "*-nf4-single"])
    assert "not applicable on 1xA10" in out
    with pytest.raises(SystemExit):
        main(["list", "--hw", "1xA10", "--gpu", "A10:1"])
    assert "not allowed with argument" in capsys.readouterr().err
    assert main(["list", "--hw", "nope"]) == 2
    assert capsys.readouterr().err.startswith("error: unknown hardware profile 'nope'")
