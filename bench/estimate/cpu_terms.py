"""What a CPU training process holds beyond the tensors the model terms count, and how its weights are charged.
Each constant is a measurement of bench/selfbench/memory_phases.py on both CPU workloads (tiny: 150k parameters,
small: 18M), which agree within 1 MiB; docs/estimator.md ("CPU process terms") gives the commands and the figures.

Two figures measure a CPU cell (bench/judge/metrics.py): under a memory budget, the rank's memory cgroup (anonymous
memory + page cache the rank first read or wrote) minus its baseline; without one, RSS (anonymous + every file page
the process has mapped and touched) minus its baseline. They differ in what they charge for file pages: `MemoryKind`.
"""

from typing import Literal

from bench.units import MiB

MemoryKind = Literal["cgroup", "rss"]

TRAINER_STATE = 25.3 * MiB
"""Anonymous memory that building the trainer adds beyond model tensors, deepspeed not yet imported: TRL's
DPOTrainer(...) (tokenizing the dataset, accelerate's state, modules imported on first use) 25.2-25.3 MiB, of which
transformers' Trainer importing deepspeed is 11.8 MiB (`DEEPSPEED_IMPORT`); plus load_from_disk 2.1 MiB and the
model objects around the mapped weights 1.7 MiB are in `MODEL_AND_DATA_OBJECTS`."""

ONLINE_TRAINER_STATE = 16.8 * MiB
"""TRAINER_STATE for GRPOTrainer and RLOOTrainer, which tokenize their prompts at each step instead of the dataset
up front: the built trainer's anonymous memory above the baseline, less MODEL_AND_DATA_OBJECTS, measured with
memory_phases on one_adapter-none-single: GRPO 20.4 and 20.6 MiB, RLOO 20.8 (tiny); GRPO and RLOO 90.3 and 90.6
(small, of which its weights, loaded as anonymous memory, are ~69)."""

MODEL_AND_DATA_OBJECTS = 3.8 * MiB
"""load_from_disk (Arrow tables over mapped files) 2.1 MiB + from_pretrained's module objects 1.7 MiB (the weights
themselves are a mapping of the checkpoint: `weights_charged`)."""

DEEPSPEED_IMPORT = 11.8 * MiB
"""Part of TRAINER_STATE that a DeepSpeed cell has already paid before its baseline (the worker imports deepspeed
with the libraries): built trainer 29.2 MiB without, 17.4 MiB with deepspeed imported first (tiny)."""

HEAP_RETENTION = 20 * MiB
"""At the step's peak, freed heap memory glibc keeps in its arenas: peak - trainer state - live tensor bytes at the
peak (torch.profiler) = 19 MiB (tiny), 22 MiB (small). glibc serves an allocation below its mmap threshold from the
heap, and raises that threshold to the size of each freed mmapped chunk (up to 32 MiB): after the first short batch,
its tile-sized temporaries come from the heap and stay there (mallinfo2 fordblks 9-23 MiB after step 1, 38-49 MiB
after the last step)."""

LIBRARY_PAGES = 24 * MiB
"""RSS only: pages of shared libraries (torch's kernels, oneDNN) first executed or read after the baseline, i.e.
during the first steps: RssFile growth 24.0 MiB (tiny, whose weights are 0.6 MB), 25 MiB (small, less its ~37 MiB of
touched weight pages); 21.2 MiB with deepspeed imported first. Already in the page cache, so a cgroup does not
charge them."""


ONLINE_HEAP_RETENTION = 8 * MiB
"""HEAP_RETENTION for the online trainers: the free heap glibc kept after the first step, above the baseline's
(memory_phases mallinfo2 fordblks, one_adapter-none-single): GRPO 7.7 and RLOO 8.3 MiB (tiny), 9.0 and 6.0 (small).
HEAP_RETENTION's derivation (peak - trainer state - live tensors per torch.profiler) does not carry over: the
profiler counts TRL's [tokens, 32768] projection buffer whole (7-10.5 MiB a call on tiny), of which a CPU process
touches one page a row (tiny's vocabulary is 512 wide)."""

ZERO3_ENGINE_STATE = 9 * MiB
"""What a ZeRO-3 engine holds beyond a ZeRO-2 one at the step's peak, measured on one rank of each (tiny, anonymous
memory): +5.5 MiB once the engine is built (its per-parameter partition state, hooks and parameter coordinator),
+9 MiB at the peak (gathering and releasing every parameter in each forward and backward churns the heap). Not traced
further."""


def memory_kind(memory_budget_bytes: int | None) -> MemoryKind:
    """A budgeted CPU cell is measured by its rank's cgroup, any other by RSS (bench/judge/metrics.model_memory)."""
    return "rss" if memory_budget_bytes is None else "cgroup"


def weights_charged(resident: float, mapped: float, written: float, kind: MemoryKind) -> float:
    """A CPU process loads a checkpoint stored in the compute dtype as a private mapping of the safetensors file
    (transformers 5 keeps the mmapped storage: `mapped` bytes, part of the `resident` weights). RSS counts the mapped
    pages once touched (all of them, here). A cgroup charges page cache to whoever first read it, here the process
    that wrote the checkpoint: a mapped page costs the cell nothing until it is written, and a written page becomes a
    private anonymous copy (`written`: weights an optimizer updates, or that a broadcast from rank 0 overwrites)."""
    if kind == "rss":
        return resident
    return resident - mapped + min(written, mapped)


def process_terms(
    kind: MemoryKind, deepspeed_imported_first: bool, zero_stage: int | None, online: bool = False
) -> dict[str, float]:
    """The process's own memory beyond tensors at the training peak, per rank. `online`: GRPO's and RLOO's trainer
    (their DeepSpeed cells are assumed to pay DEEPSPEED_IMPORT before the baseline as the others do: not measured)."""
    state = ONLINE_TRAINER_STATE if online else TRAINER_STATE
    out = {
        "trainer_state": max(0.0, state - (DEEPSPEED_IMPORT if deepspeed_imported_first else 0.0)),
        "model_and_data_objects": MODEL_AND_DATA_OBJECTS,
    }
    retention = ONLINE_HEAP_RETENTION if online else HEAP_RETENTION
    if retention:
        out["heap_retention"] = retention
    if zero_stage == 3:
        out["zero3_engine_state"] = ZERO3_ENGINE_STATE
    if kind == "rss":
        out["library_pages"] = LIBRARY_PAGES
    return out
