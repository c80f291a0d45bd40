"""Known issues matched on the real message texts of their upstream threads (short excerpts, source on each line)."""

from dataclasses import dataclass

import pytest

from bench.errors import BenchError
from bench.matrix.axes import Backend, Init, Launcher, Method, Option, Quant, Setup
from bench.matrix.cell import Cell
from bench.matrix.known_issues import KnownIssue, find_known_issue, known_issues, load_known_issues

# The stack of the latest CPU run (results/cpu/*/env.json `packages`).
STACK: dict[str, str | None] = {
    "torch": "2.13.0+cpu",
    "transformers": "5.23.0",
    "trl": "1.16.0",
    "peft": "0.21.2",
    "accelerate": "1.15.0",
    "deepspeed": "0.19.8",
    "bitsandbytes": "0.50.2",
    "datasets": "5.2.0",
    "pandas": "3.1.1",
}

# Real texts. Tracebacks are shortened to the lines that matter.
TORCH_CUDA_OOM = (  # torch's own message, as in tests/unit/judge/test_classify.py
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "22.05 GiB of which 1.12 GiB is free."
)
WEIGHT_NOT_2D = "RuntimeError: 'weight' must be 2-D"  # trl#669 traceback, trl#687 and trl#6403 (zero3)
PRECOMPUTE_ZERO2 = (  # trl#2985, ZeRO-2 with precompute_ref_log_probs
    "[rank0]: RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cpu and "
    "cuda:0! (when checking argument for argument index in method wrapper_CUDA__index_select)"
)
PRECOMPUTE_FSDP2 = (  # trl#6470
    "RuntimeError: Expected all tensors to be on the same device, but got index is on cuda:0, different from other "
    "tensors on cpu"
)
MIXED_DTYPE_GATHER = "TypeError: output tensor must have the same type as input tensor"  # DeepSpeed#8072, trl#6091
REQUIRES_OPTIMIZER = "AssertionError: zero stage 2 requires an optimizer"  # trl#825
CPU_ADAM = (  # trl#955
    "AssertionError: CPUAdam param is on cuda:0 and must be 'cpu', make sure you enabled 'offload_optimizer': 'cpu' "
    "in your ZeRO config."
)
FSDP_REF_ON_CPU = (  # FSDP + DPO, reference left on the CPU (hiyouga/LlamaFactory#9560, as trl#1147)
    "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:x and cpu!"
)
SPLIT_MISMATCH_1399 = (  # trl#1399
    "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cuda:3!"
)
SPLIT_MISMATCH_29620 = (  # transformers#29620
    "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cuda:1!"
)
BNB_OTHER_DEVICE = (  # accelerate#1515 era, quoted in artidoro/qlora#186 and trl#1352
    "ValueError: You can't train a model that has been loaded in 8-bit precision on a different device than the one "
    "you're training on."
)
REWARD_BF16_HEAD = (  # this project's CPU runs, results/cpu/20261124-002043 reward-one_adapter-int8-single
    "RuntimeError: expected m1 and m2 to have the same dtype, but got: float != c10::BFloat16"
)
FSDP2_INT8_PARAMS = (  # this project's first GPU run, results/1xH200/20261126-182033 one_adapter-int8-fsdp_offload
    "RuntimeError: Creating a Parameter from an instance of type Int8Params requires that detach() returns an instance "
    "of the same type, but return type Tensor was found instead."
)
BNB_MULTIPLE_DEVICES = (  # peft#414
    "ValueError: You can't train a model that has been loaded in 8-bit precision on multiple devices"
)
ZERO3_EMPTY_WEIGHT = (  # peft#1890 (same loader path as peft#1566; axolotl#1240 traces it to transformers#29266)
    'ValueError: Trying to set a tensor of shape torch.Size([43176, 8192]) in "weight" (which has shape '
    "torch.Size([0])), this look incorrect."
)
ZERO3_NOT_INITIALIZED = (  # peft#2014
    "ValueError: Model was not initialized with `Zero-3` despite being configured for DeepSpeed Zero-3. Please "
    "re-initialize your model via `Model.from_pretrained(...)` or `Model.from_config(...)` after creating your "
    "`TrainingArguments`!"
)
LOAD_OOM = (  # peft#2016: from_pretrained runs out of memory; frame from peft#1566's traceback
    TORCH_CUDA_OOM + "\nTraceback (most recent call last):\n"
    '  File "/usr/local/lib/python3.10/dist-packages/transformers/modeling_utils.py", line 3502, in from_pretrained\n'
    "    ) = cls._load_pretrained_model(\n"
)
ALLOCATOR_FLUSHES = (  # DeepSpeed stage-3 warning, as quoted in fe1ixxu/ALMA#42
    "2 pytorch allocator cache flushes since last step. this happens when there is high memory pressure and is "
    "detrimental to performance."
)


def cell(
    init: Init,
    quant: Quant,
    backend: Backend,
    launcher: Launcher,
    options: tuple[Option, ...] = (),
    method: Method = Method.DPO,
) -> Cell:
    return Cell(init=init, quant=quant, backend=backend, launcher=launcher, options=options, method=method)


def stack(**versions: str | None) -> dict[str, str | None]:
    return {**STACK, **versions}


PRE = (Option.PRECOMPUTE_REF,)
DS, ACC, TR, PY = Launcher.DEEPSPEED, Launcher.ACCELERATE, Launcher.TORCHRUN, Launcher.PYTHON
TWO, ONE = Init.TWO_MODELS, Init.ONE_ADAPTER
NONE, INT8, NF4 = Quant.NONE, Quant.INT8, Quant.NF4


@dataclass(frozen=True)
class Case:
    issue: str
    text: str
    inside: Cell
    outside: Cell
    in_range: dict[str, str | None]
    out_of_range: tuple[dict[str, str | None], ...] = ()


CASES = (
    Case(
        "fsdp2-int8-params",
        FSDP2_INT8_PARAMS,
        Cell(init=ONE, quant=Quant.INT8, backend=Backend.FSDP_OFFLOAD, launcher=Launcher.ACCELERATE),
        Cell(init=ONE, quant=NF4, backend=Backend.FSDP_OFFLOAD, launcher=Launcher.ACCELERATE),
        STACK,
    ),
    Case(
        "precompute-ref-deepspeed",
        PRECOMPUTE_ZERO2,
        cell(TWO, NONE, Backend.ZERO2, DS, PRE),
        cell(TWO, NONE, Backend.ZERO2, DS),
        stack(trl="1.8.0"),
        (stack(trl="1.9.0"),),
    ),
    Case(
        "precompute-ref-deepspeed",
        WEIGHT_NOT_2D,
        cell(TWO, NONE, Backend.ZERO3, DS, PRE),
        cell(TWO, NONE, Backend.FSDP, ACC, PRE),
        stack(trl="1.8.0.dev0"),
        (stack(trl="1.9.0"),),
    ),
    Case(
        "precompute-ref-fsdp",
        PRECOMPUTE_FSDP2,
        cell(TWO, NONE, Backend.FSDP, ACC, PRE),
        cell(TWO, NONE, Backend.DDP, TR, PRE),
        stack(trl="1.14.0"),
        (stack(trl="1.14.1"),),
    ),
    Case(
        "zero3-peft-mixed-dtype",
        MIXED_DTYPE_GATHER,
        cell(ONE, NONE, Backend.ZERO3, DS),
        cell(TWO, NONE, Backend.ZERO3, DS),
        stack(trl="1.6.0", deepspeed="0.19.2"),
        (stack(trl="1.7.0", deepspeed="0.19.2"), stack(trl="1.6.0", deepspeed="0.19.1")),
    ),
    Case(
        "zero3-reference-not-initialized",
        WEIGHT_NOT_2D,
        cell(TWO, NONE, Backend.ZERO3, DS),
        cell(ONE, NONE, Backend.ZERO3, DS),
        stack(trl="0.7.1"),
        (stack(trl="0.7.2"),),
    ),
    Case(
        "zero2-reference-requires-optimizer",
        REQUIRES_OPTIMIZER,
        cell(TWO, NONE, Backend.ZERO2, ACC),
        cell(TWO, NONE, Backend.ZERO3, ACC),
        stack(trl="0.7.1"),
        (stack(trl="0.7.2"),),
    ),
    Case(
        "zero2-reference-cpu-adam",
        CPU_ADAM,
        cell(TWO, NONE, Backend.ZERO2, DS),
        cell(ONE, NONE, Backend.ZERO2, DS),
        stack(trl="1.9.0"),
        (stack(trl="1.10.0"),),
    ),
    Case(
        "fsdp-reference-on-cpu",
        FSDP_REF_ON_CPU,
        cell(TWO, NONE, Backend.FSDP, ACC),
        cell(ONE, NONE, Backend.FSDP, ACC),
        stack(trl="0.15.2"),
        (stack(trl="0.16.0"),),
    ),
    Case(
        "device-map-split",
        SPLIT_MISMATCH_1399,
        cell(ONE, NF4, Backend.DEVICE_MAP, PY),
        cell(ONE, NF4, Backend.DDP, TR),
        STACK,
    ),
    Case(
        "device-map-split",
        SPLIT_MISMATCH_29620,
        cell(TWO, NONE, Backend.DEVICE_MAP, PY),
        cell(TWO, NONE, Backend.SINGLE, PY),
        STACK,
    ),
    Case(
        "bnb-placement-distributed",
        BNB_OTHER_DEVICE,
        cell(ONE, INT8, Backend.DDP, TR),
        cell(ONE, INT8, Backend.ZERO2, DS),
        STACK,
    ),
    Case(
        "bnb-placement-distributed",
        BNB_MULTIPLE_DEVICES,
        cell(TWO, NF4, Backend.FSDP, ACC),
        cell(TWO, NONE, Backend.FSDP, ACC),
        STACK,
    ),
    Case(
        "zero3-bnb-int8",
        ZERO3_EMPTY_WEIGHT,
        cell(ONE, INT8, Backend.ZERO3, DS),
        cell(ONE, INT8, Backend.ZERO2, DS),
        STACK,
    ),
    Case(
        "zero3-bnb-int8",
        ZERO3_NOT_INITIALIZED,
        cell(TWO, INT8, Backend.ZERO3_OFFLOAD, ACC),
        cell(TWO, NF4, Backend.ZERO3_OFFLOAD, ACC),
        STACK,
    ),
    Case(
        "zero3-bnb-nf4-old-stack",
        ZERO3_NOT_INITIALIZED,
        cell(ONE, NF4, Backend.ZERO3, DS),
        cell(ONE, NF4, Backend.DDP, TR),
        stack(transformers="4.44.2"),
        (stack(transformers="4.45.0"),),
    ),
    Case(
        "zero3-quantized-load-peak",
        LOAD_OOM,
        cell(ONE, NF4, Backend.ZERO3, DS),
        cell(ONE, NF4, Backend.ZERO2, DS),
        STACK,
    ),
    Case(
        "zero3-allocator-growth",
        ALLOCATOR_FLUSHES + "\n" + TORCH_CUDA_OOM,
        cell(TWO, NONE, Backend.ZERO3, DS),
        cell(TWO, NONE, Backend.ZERO2, DS),
        STACK,
    ),
    Case(
        "device-map-auto-split",
        SPLIT_MISMATCH_29620,
        Cell(init=ONE, quant=NF4, backend=Backend.SINGLE, launcher=PY, setup=Setup.NEWCOMER),
        cell(ONE, NF4, Backend.SINGLE, PY),
        STACK,
    ),
    Case(
        "reward-qlora-bf16-head-fp32",
        REWARD_BF16_HEAD,
        cell(ONE, NF4, Backend.ZERO3, DS, method=Method.REWARD),
        cell(ONE, NF4, Backend.ZERO3, DS, method=Method.SFT),
        STACK,
    ),
    Case(
        "zero2-replicated-reference-oom",
        TORCH_CUDA_OOM,
        cell(TWO, NONE, Backend.ZERO2, DS),
        cell(ONE, NONE, Backend.ZERO2, DS),
        STACK,
    ),
)


def shipped(issue_id: str) -> KnownIssue:
    return next(issue for issue in known_issues() if issue.id == issue_id)


def test_every_shipped_entry_is_tested_on_a_real_message():
    assert {case.issue for case in CASES} == {issue.id for issue in known_issues()}


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.issue}:{c.text[:30]}")
def test_real_message_matches_its_entry_first(case: Case):
    found = find_known_issue(case.text, case.inside, case.in_range, known_issues())
    assert found is not None and found.id == case.issue


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.issue}:{c.text[:30]}")
def test_no_match_on_a_cell_outside_the_conditions(case: Case):
    assert not shipped(case.issue).matches(case.text, case.outside, case.in_range)


@pytest.mark.parametrize("case", [c for c in CASES if c.out_of_range], ids=lambda c: f"{c.issue}:{c.text[:30]}")
def test_no_match_outside_the_version_range(case: Case):
    for versions in case.out_of_range:
        assert not shipped(case.issue).matches(case.text, case.inside, versions), versions


def test_an_unknown_or_missing_version_does_not_match_a_ranged_entry():
    issue = shipped("zero3-reference-not-initialized")
    inside = cell(TWO, NONE, Backend.ZERO3, DS)
    assert not issue.matches(WEIGHT_NOT_2D, inside, {})
    assert not issue.matches(WEIGHT_NOT_2D, inside, stack(trl=None))
    assert not issue.matches(WEIGHT_NOT_2D, inside, stack(trl="unknown"))


def test_without_a_cell_only_unconditional_entries_match(tmp_path):
    assert find_known_issue(SPLIT_MISMATCH_1399, None, STACK, known_issues()) is None
    path = tmp_path / "known_issues.yaml"
    path.write_text("issues:\n  - {id: any-oom, pattern: 'out of memory', links: ['https://x.test/1'], note: n}\n")
    found = find_known_issue(TORCH_CUDA_OOM, None, STACK, load_known_issues(path))
    assert found is not None and found.id == "any-oom"


def test_options_condition_needs_one_of_the_listed_options():
    issue = shipped("precompute-ref-fsdp")
    with_other_option = cell(TWO, NONE, Backend.FSDP, ACC, (Option.LIGER,))
    with_both = cell(TWO, NONE, Backend.FSDP, ACC, (Option.LIGER, Option.PRECOMPUTE_REF))
    assert not issue.matches(PRECOMPUTE_FSDP2, with_other_option, stack(trl="1.14.0"))
    assert issue.matches(PRECOMPUTE_FSDP2, with_both, stack(trl="1.14.0"))


def test_load_time_oom_needs_the_loading_frames():
    issue = shipped("zero3-quantized-load-peak")
    assert not issue.matches(TORCH_CUDA_OOM, cell(ONE, NF4, Backend.ZERO3, DS), STACK)


GOOD_ENTRY = """\
issues:
  - id: sample
    pattern: "zero stage \\\\d+ requires an optimizer"
    when: {backend: [zero2]}
    versions: {trl: "<0.7.2"}
    links: [https://github.com/huggingface/trl/pull/825]
    note: one line
"""


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("note: one line", "note: one line\n    fix: soon", r"known_issues\.yaml: unknown key 'issues\.0\.fix'"),
        ("[zero2]", "[zero4]", r"known_issues\.yaml: key 'issues\.0\.when\.backend\.0': unknown value 'zero4'"),
        ("{backend: [zero2]}", "{gpu: [a100]}", r"known_issues\.yaml: unknown key 'issues\.0\.when\.gpu'"),
        ('"zero stage', '"(zero stage', r"key 'issues\.0\.pattern': invalid regular expression: missing \)"),
        ('"<0.7.2"', '"before 0.7.2"', r"key 'issues\.0\.versions': trl: 'before 0.7.2' is not a PEP 440"),
        ("{trl:", "{trll:", r"key 'issues\.0\.versions': unknown package 'trll'; allowed: torch, "),
        (
            "[https://github.com/huggingface/trl/pull/825]",
            "[]",
            r"key 'issues\.0\.links': Tuple should have at least 1 item",
        ),
        ("[https://github.com/huggingface/trl/pull/825]", "[trl#825]", r"'trl#825' is not an https:// link"),
        ("note: one line", 'note: "one\\nline"', r"key 'issues\.0\.note': must be one line"),
        ("    note: one line\n", "", r"known_issues\.yaml: missing key 'issues\.0\.note'"),
        ("{backend: [zero2]}", "{backend: []}", r"key 'issues\.0\.when\.backend': Tuple should have at least 1 item"),
    ],
)
def test_a_malformed_entry_is_one_line_naming_file_and_key(tmp_path, old, new, expected):
    assert old in GOOD_ENTRY
    path = tmp_path / "known_issues.yaml"
    path.write_text(GOOD_ENTRY.replace(old, new))
    with pytest.raises(BenchError, match=expected) as caught:
        load_known_issues(path)
    assert "\n" not in str(caught.value)


def test_the_good_entry_loads_and_ids_are_unique(tmp_path):
    path = tmp_path / "known_issues.yaml"
    path.write_text(GOOD_ENTRY)
    (issue,) = load_known_issues(path)
    assert issue.matches(REQUIRES_OPTIMIZER, cell(TWO, NONE, Backend.ZERO2, DS), stack(trl="0.7.1"))
    entry = GOOD_ENTRY.split("issues:\n", 1)[1]
    path.write_text(GOOD_ENTRY + entry)
    with pytest.raises(BenchError, match=r"known_issues\.yaml: key 'issues': duplicate id 'sample'"):
        load_known_issues(path)
