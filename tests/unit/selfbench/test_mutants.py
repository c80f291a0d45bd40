"""make mutants' own logic: naming a mutant's function, reading its diff, and holding survivors against the list of
equivalent mutants (an unlisted survivor and a stale entry both fail the run)."""

import tomllib

import pytest

from bench.errors import BenchError
from bench.paths import PROJECT_ROOT
from bench.selfbench.mutants import (
    EQUIVALENT_FILE,
    SUBSETS,
    Equivalent,
    Survivor,
    changed_lines,
    explain,
    function_of,
    in_modules,
    load_equivalents,
    module_of,
    report,
    select,
)

DIFF = """--- bench/judge/learning.py
+++ bench/judge/learning.py
@@ -1,3 +1,3 @@
 def end_steps(steps: int) -> int:
     \"\"\"How many final steps the end loss averages.\"\"\"
-    return max(3, steps // 4)
+    return max(3, steps // 5)"""


def test_function_of_a_mutant():
    assert function_of("bench.judge.learning.x_check__mutmut_12") == "bench.judge.learning.check"
    assert function_of("bench.judge.classify.x__status_of__mutmut_3") == "bench.judge.classify._status_of"
    assert function_of("bench.m.xǁRowǁerror__mutmut_1") == "bench.m.Row.error"


def test_changed_lines_of_a_diff():
    assert changed_lines(DIFF) == ("return max(3, steps // 4)", "return max(3, steps // 5)")


def survivor(original: str, mutated: str, function: str = "bench.judge.learning.end_steps") -> Survivor:
    return Survivor("n", "survived", function, original, mutated, DIFF)


def entry(original: str, mutated: str, function: str = "bench.judge.learning.end_steps") -> Equivalent:
    return Equivalent.model_validate({"function": function, "from": original, "to": mutated, "reason": "r"})


def test_survivors_are_explained_only_by_an_entry_for_the_same_function_and_change():
    s = survivor("return max(3, steps // 4)", "return max(3, steps // 5)")
    assert explain([s], [entry(" return max(3, steps // 4) ", "return max(3, steps // 5)")]) == ([], [])
    other_change = entry("return max(3, steps // 4)", "return max(3, steps / 4)")
    other_function = entry("return max(3, steps // 4)", "return max(3, steps // 5)", function="bench.x.f")
    unexplained, stale = explain([s], [other_change, other_function])
    assert unexplained == [s] and stale == [other_change, other_function]
    text = report({"killed": 9, "survived": 1}, unexplained, stale, 0)
    any_change_of_the_line = Equivalent.model_validate(
        {"function": s.function, "from": "return max(3, steps // 4)", "reason": "r"}
    )
    any_mutant_of_the_function = Equivalent.model_validate({"function": s.function, "reason": "r"})
    assert explain([s], [any_change_of_the_line]) == explain([s], [any_mutant_of_the_function]) == ([], [])
    assert "unexplained survivors: 1" in text and DIFF in text and text.count("stale entry") == 2


def test_the_shipped_list_reads_and_every_entry_has_a_reason():
    entries = load_equivalents(EQUIVALENT_FILE)
    assert all(e.reason.strip() and e.function.startswith("bench.") for e in entries)


def test_a_malformed_list_is_one_line(tmp_path):
    bad = tmp_path / "eq.yaml"
    bad.write_text("- function: f\n  from: a\n  to: b\n")  # no reason
    with pytest.raises(BenchError, match=r"eq.yaml: 1 validation error"):
        load_equivalents(bad)


CONFIGURED = ["bench/judge/learning.py", "bench/report/verdict.py", "bench/estimate/gate.py"]


def test_only_selects_a_part_of_the_configured_modules_and_tests():
    assert select(CONFIGURED, []) == CONFIGURED
    assert select(CONFIGURED, ["judge"]) == ["bench/judge/learning.py", "bench/report/verdict.py"]
    assert select(CONFIGURED, ["estimate"]) == ["bench/estimate/gate.py"]
    assert select(CONFIGURED, ["judge", "estimate"]) == CONFIGURED
    tests = ["tests/unit/judge", "tests/unit/estimate", "tests/unit/report/test_verdict.py"]
    assert select(tests, ["judge"], part=1) == ["tests/unit/judge", "tests/unit/report/test_verdict.py"]
    assert select(tests, ["estimate"], part=1) == ["tests/unit/estimate"]
    run = ["bench/run/budget.py", "bench/isolation/step_marks.py", "tests/unit/run/test_slots.py"]
    assert select([*CONFIGURED, *run[:2]], ["run"]) == run[:2]
    assert select([*tests, run[2]], ["run"], part=1) == [run[2]]
    with pytest.raises(BenchError, match="no path"):
        select(["bench/judge/learning.py"], ["estimate"])
    with pytest.raises(BenchError, match="--only gates: not one of"):
        select(CONFIGURED, ["gates"])


def test_every_configured_module_and_test_is_in_one_part():
    mutmut = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mutmut"]
    for part, key in enumerate(("only_mutate", "pytest_add_cli_args_test_selection")):
        for path in mutmut[key]:
            assert sum(path.startswith(SUBSETS[name][part]) for name in SUBSETS) == 1, path


def test_entries_outside_the_selected_modules_are_not_stale():
    assert module_of("bench/judge/learning.py") == "bench.judge.learning"
    assert in_modules("bench.judge.learning.x_check__mutmut_1", ["bench.judge.learning"])
    assert not in_modules("bench.judge.learning_rate.check", ["bench.judge.learning"])
    judge = entry("a", "b")
    estimator = entry("a", "b", function="bench.estimate.predict.train_terms")
    assert explain([], [judge, estimator], ["bench.judge.learning"]) == ([], [judge])
    assert explain([], [judge, estimator]) == ([], [judge, estimator])


def test_a_kept_run_brings_unmutated_copies_up_to_date_and_mutates_a_module_new_to_the_scope(tmp_path):
    from bench.selfbench.mutants import refresh_unmutated

    for name in ("old.py", "new.py", "helper.py"):
        (tmp_path / "pkg" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "pkg" / name).write_text(f"# {name} today\n")
        (tmp_path / "mutants" / "pkg").mkdir(parents=True, exist_ok=True)
        (tmp_path / "mutants" / "pkg" / name).write_text(f"# {name} as copied\n")
    (tmp_path / "mutants" / "pkg" / "old.py.meta").write_text("{}")  # mutated by the last run
    refresh_unmutated(tmp_path, ["pkg/old.py", "pkg/new.py"], source_paths=["pkg"])
    copies = tmp_path / "mutants" / "pkg"
    assert (copies / "helper.py").read_text() == "# helper.py today\n"
    assert (copies / "old.py").read_text() == "# old.py as copied\n"  # mutmut's mutants: kept
    assert not (copies / "new.py").exists()  # the copy of a module out of scope last time: mutmut mutates it
