"""The window's phases (`python -m bench window`, bench/run/window.py): what a lent GPU runs, in priority order, each
phase a `bench run` of its own; and the same phases on a CPU profile, with small workloads, to rehearse them.

On a card (its one-GPU profile), lower numbers first: 1 `dpo`, the DPO matrix on the 1B workload; 2 `methods`, every
other method's coverage pass; 3 `emulated:<card>`, the DPO coverage pass of each 24 GB card under `--emulate`, capped
at 24 GB in the slots; 4 `7b`, the 7B workload's cells (SEVEN_B), and `7b-alone` with every slot; 5 `speed`, the
exclusive speed pass (SPEED_TRIALS more trials of SPEED_CELLS, each alone, once every phase above has ended); 6 the
rest of the other methods' matrix and of each 24 GB card's DPO matrix, for as long as the window lasts."""

from dataclasses import dataclass, replace
from itertools import chain, zip_longest

from bench.matrix.cell import Cell, quant_of_id
from bench.matrix.methods import Method
from bench.matrix.profiles import HardwareProfile
from bench.run.budget import first_pass
from bench.run.memory_slots import SPEED_CELLS, SPEED_TRIALS
from bench.worker.allocator_history import HISTORY_ENV

WORKLOAD = "llama-3.2-1b"
"""The 1B real-architecture workload of the card's own matrix."""
EMULATED = (("1xA10", "phi-2"), ("1xL4", WORKLOAD), ("1x4090", "opt-1.3b"))
"""(profile, workload) of each 24 GB card emulated beside the card's own runs: its default workload. phi-2's two full
models running out of memory on an A10 is the failure this project started from."""
SEVEN_B = (
    "mistral-7b",
    (
        "one_adapter-none-single",
        "one_adapter-int8-single",
        "one_adapter-nf4-single",
        "two_adapters-nf4-single",
        "two_models-none-single",
        "two_models-none-zero3_offload",
    ),
)
"""(workload, cells) of the 7B phase, on the card's one-GPU profile: DPO of Mistral-7B's architecture (the base of
Zephyr-7B, DPO's best-known recipe) at 2,048 tokens, batch 1, 8 steps. LoRA in bf16 and over int8, QLoRA with the
reference as the disabled adapter and as a second adapter, the full fine-tune on the GPU, and the full fine-tune
with ZeRO-3's optimizer offload. PREDICTED on 1xH200 (`python -m bench predict --hw 1xH200 --workload mistral-7b`):
GPU 7.9-17.9 GB for the adapters, 76.3 GB for the full fine-tune (likely_fits on an 80 GB H100: 50 %), 35.1 GB plus
115.9 GB of host memory for the offload one: the offload full fine-tune that leaves room on a 128 GiB host (ZeRO-2
offload 130.6 GB, FSDP offload 130.4 GB, ZeRO-3 with parameter offload 144.8 GB; Llama-3.1-8B's ZeRO-3 offload
128.5 GB, Qwen2.5-7B's 121.8 GB). Its 8 steps take 2-3.5 minutes (PREDICTED 17-25 s a step, the host's Adam over 7.2B
parameters), the others' under 11 s."""
SEVEN_B_ALONE = ("two_models-none-zero3_offload",)
"""The 7B cells that run with every slot: 115.9 GB of host memory PREDICTED, of the lent box's 128 GiB."""
WINDOW_WORKLOADS = (WORKLOAD, "phi-2", "opt-1.3b", SEVEN_B[0])
"""The workloads of the window, in the order its phases need them (and what `carry-assets` carries by default)."""
HISTORY_STEPS = 2
"""The DPO and other methods' phases' cells record the CUDA allocator's history of their load and first two steps
(the optimizer's state made in the first): what the allocator term is held against, over TRL's fused head and over
the losses that materialise their logits (SFT's, ORPO's). The speed pass and the emulated cards run unrecorded."""
CELL_TIMEOUT_S = 240
"""A healthy 1B cell ends in 1-2 min on an H100 (an offload cell's host optimizer included); a hung one in this."""
SEVEN_B_CELL_TIMEOUT_S = 600
"""A 7B cell loads 14.5-29 GB before its steps; the offload one then takes 8 steps of the host's Adam (PREDICTED
17-25 s each)."""

DPO, METHODS, EMULATED_CARDS, SEVEN_B_CELLS, SPEED, METHODS_REST, EMULATED_REST = 1, 2, 3, 4, 5, 6, 7
"""The phases' priorities (bench/run/slot_ledger.py: lower first)."""


@dataclass(frozen=True)
class WindowPhase:
    """One phase: a `bench run` of one profile and workload, its cells, when it may start, and how its cells take the
    device's slots."""

    name: str
    priority: int
    target: tuple[str, ...]
    """`--hw NAME` or `--gpu NAME:1`, with `--emulate` for a smaller card."""
    profile: str
    """The profile's name: its results folder."""
    workload: str
    run_id: str
    cells: tuple[str, ...]
    after: tuple[str, ...] = ()
    """The phases it starts after: the one whose run it resumes (or whose records it reads), the speed pass for the
    rests (nothing else runs on the machine while it measures)."""
    alone: bool = False
    repeats: int = 1
    cell_timeout: int = CELL_TIMEOUT_S
    speed_of: str | None = None
    """The speed pass: its cells are SPEED_CELLS of that phase's, ok with a shared speed, when it starts, taken one
    quantization at a time (spread_over_quantizations)."""
    allocator_history: int = 0
    """Steps of each cell's start the CUDA allocator records (bench/worker/allocator_history.py; 0: none)."""

    def environment(self) -> dict[str, str]:
        """What the phase's `bench run` adds to the window's environment."""
        return {HISTORY_ENV: str(self.allocator_history)} if self.allocator_history else {}

    def argv(self, slots: int | None, minutes: float) -> list[str]:
        """`bench run`'s arguments, with `minutes` as its time budget."""
        argv = [*self.target, "--workload", self.workload, "--method", "all", "--run-id", self.run_id]
        argv += ["--filter", ",".join(self.cells), "--executor", "local", "--cell-timeout", str(self.cell_timeout)]
        argv += ["--slot-priority", str(self.priority), "--speed-pass", "0", "--time-budget", f"{minutes:.2f}"]
        argv += ["--gpu-slots", str(slots)] if slots is not None else []
        argv += ["--alone"] if self.alone else []
        return argv + (["--repeats", str(self.repeats)] if self.repeats > 1 else [])


@dataclass(frozen=True)
class Emulated:
    """A smaller card's phase: its target, profile and workload, its cells first, the rest later."""

    target: tuple[str, ...]
    profile: str
    workload: str
    cells: tuple[str, ...]
    rest: tuple[str, ...]


@dataclass(frozen=True)
class WindowContent:
    """What a window runs, phase by phase: the card's (or the rehearsal's) cells."""

    target: tuple[str, ...]
    profile: str
    workload: str
    dpo: tuple[str, ...]
    methods: tuple[str, ...]
    methods_rest: tuple[str, ...]
    emulated: tuple[Emulated, ...]
    seven_b: tuple[str, tuple[str, ...], tuple[str, ...]]
    """(workload, cells in slots, cells alone)."""
    speed_cells: int = SPEED_CELLS
    slots: int | None = None
    """--gpu-slots of every run; None: the card's automatic count."""


def spread_over_quantizations(cells: list[str], count: int) -> tuple[str, ...]:
    """The first `count` of `cells` taking their quantizations in turn (in the order each first appears), each in
    the cells' order: the speed model's per-call dequantization constant needs 4-bit and 8-bit cells measured alone
    beside unquantized ones (docs/evidence/speed-physics.md, "Not met")."""
    groups: dict[str, list[str]] = {}
    for cell in cells:
        groups.setdefault(quant_of_id(cell), []).append(cell)
    turns = chain.from_iterable(zip_longest(*groups.values()))
    return tuple(c for c in turns if c is not None)[:count]


def window_phases(content: WindowContent, run_id: str) -> list[WindowPhase]:
    """The content's phases, in priority order (bench/run/window.py runs them)."""
    card = content.target
    dpo = WindowPhase("dpo", DPO, card, content.profile, content.workload, run_id, content.dpo,
                      allocator_history=HISTORY_STEPS)  # fmt: skip
    methods = WindowPhase("methods", METHODS, card, content.profile, content.workload, f"{run_id}-methods",
                          content.methods, allocator_history=HISTORY_STEPS)  # fmt: skip
    seven_b, shared, alone = content.seven_b
    big = dict(
        profile=content.profile, workload=seven_b, run_id=f"{run_id}-{seven_b}", cell_timeout=SEVEN_B_CELL_TIMEOUT_S
    )
    phases = [dpo, methods]
    phases += [_emulated(e, run_id, EMULATED_CARDS, e.cells) for e in content.emulated]
    phases += [WindowPhase("7b", SEVEN_B_CELLS, card, cells=shared, **big)]
    phases += [WindowPhase("7b-alone", SEVEN_B_CELLS, card, cells=alone, after=("7b",), alone=True, **big)]
    before = tuple(p.name for p in phases if p.cells)  # every phase of a higher priority has ended: nothing beside it
    speed = spread_over_quantizations(list(dpo.cells), content.speed_cells)
    phases += [WindowPhase("speed", SPEED, card, content.profile, content.workload, run_id, speed, after=before,
                           alone=True, repeats=1 + SPEED_TRIALS, speed_of="dpo")]  # fmt: skip
    phases += [WindowPhase("methods-rest", METHODS_REST, card, content.profile, content.workload, methods.run_id,
                           content.methods_rest, after=("methods", "speed"),
                           allocator_history=HISTORY_STEPS)]  # fmt: skip
    phases += [
        _emulated(e, run_id, EMULATED_REST, e.rest, (f"emulated:{e.profile}", "speed")) for e in content.emulated
    ]
    kept = [p for p in phases if p.cells]
    names = {p.name for p in kept}
    return [replace(p, after=tuple(a for a in p.after if a in names)) for p in kept]


def _emulated(
    card: Emulated, run_id: str, priority: int, cells: tuple[str, ...], after: tuple[str, ...] = ()
) -> WindowPhase:
    name = f"emulated:{card.profile}" + ("-rest" if after else "")
    return WindowPhase(name, priority, card.target, card.profile, card.workload, f"{run_id}-emulated", cells, after)


def runnable(cells: list[Cell], profile: HardwareProfile) -> list[Cell]:
    from bench.matrix.on_profile import CellOnProfile
    from bench.matrix.scenario import not_applicable_reason

    return [c for c in cells if not_applicable_reason(CellOnProfile(c, profile)) is None]


def coverage_passes(cells: list[Cell]) -> tuple[list[str], list[str]]:
    """Each method's coverage pass (its backends, init modes, quantizations and launchers once), and the rest."""
    first: list[str] = []
    for method in dict.fromkeys(c.method for c in cells):
        first += [c.id for c in first_pass([c for c in cells if c.method == method])]
    return first, [c.id for c in cells if c.id not in set(first)]


def card_content(target: tuple[str, ...], profile: HardwareProfile, emulate: bool = True) -> WindowContent:
    """The window of a card's one-GPU profile: its DPO matrix, the other methods, the 24 GB cards emulated (where
    the card is bigger than they are), the 7B cells, the speed pass."""
    from bench.matrix.profiles import load_profile
    from bench.matrix.scenario import expand, load_matrix

    matrix = expand(load_matrix())
    mine = runnable(matrix, profile)
    methods, rest = coverage_passes([c for c in mine if c.method != Method.DPO])
    cards = []
    for name, workload in EMULATED if emulate else ():
        small = load_profile(name)
        if (small.memory_per_device_gb or 0) < (profile.memory_per_device_gb or 0):
            first, later = coverage_passes([c for c in runnable(matrix, small) if c.method == Method.DPO])
            cards.append(Emulated(("--hw", name, "--emulate"), name, workload, tuple(first), tuple(later)))
    seven_b, seven_b_cells = SEVEN_B
    shared = tuple(c for c in seven_b_cells if c not in SEVEN_B_ALONE)
    return WindowContent(
        target, profile.name, WORKLOAD, tuple(c.id for c in mine if c.method == Method.DPO), tuple(methods),
        tuple(rest), tuple(cards), (seven_b, shared, SEVEN_B_ALONE),
    )  # fmt: skip


REHEARSAL = dict(
    workload="tiny",
    dpo=("one_adapter-none-single", "two_models-none-single"),
    methods=("sft-one_adapter-none-single",),
    methods_rest=("reward-one_adapter-none-single",),
    second=("tiny-synthetic", ("one_adapter-none-single",)),
    seven_b=("small", ("one_adapter-none-single",), ("two_adapters-none-single",)),
    speed_cells=1,
    slots=6,
)
"""The rehearsal on a CPU profile with a memory budget: the same phases with small workloads and a cell or two each
(`tiny`; `small` standing in for the 7B), and, as there is no card to emulate on a CPU, a second workload's run of
the same profile standing in for the emulated cards: another run beside the first through the same slots."""


def rehearsal_content(profile: HardwareProfile) -> WindowContent:
    """The window's phases on a CPU profile (bench/run/window.py rehearses them on it: same code path)."""
    from bench.errors import BenchError

    if profile.device != "cpu" or profile.memory_budget_gb is None:
        raise BenchError(
            f"--hw {profile.name}: the window rehearses on a CPU profile with memory_budget_gb (its slots share the "
            "memory a cell's ranks get alone), e.g. cpu-budget; on a GPU leave --hw out"
        )
    r = REHEARSAL
    workload, cells = r["second"]
    second = Emulated(("--hw", profile.name), profile.name, workload, cells, ())
    return WindowContent(
        ("--hw", profile.name), profile.name, r["workload"], r["dpo"], r["methods"], r["methods_rest"], (second,),
        r["seven_b"], r["speed_cells"], r["slots"],
    )  # fmt: skip
