"""What the run's fork server imports once for every cell (bench/isolation/zygote.py): the worker's own modules and
the libraries every cell imports (bench/worker/build.py import_libraries). A cell's extras (deepspeed, another
method's trainer) are imported by its child, as a fresh worker would.

Where `from trl import DPOTrainer` spends its time on CPU (python -X importtime, 2 cores): peft imports
bitsandbytes (peft/helpers.py), whose default backend wraps its kernels in torch.compile at import
(bitsandbytes/backends/default/ops.py), which imports torch._dynamo and torch._inductor (about 1.5 s); peft's
constants import transformers' Bloom model (peft/utils/constants.py), and with it transformers' generation code
(about 2 s); transformers' trainer utilities, datasets with pyarrow and pandas, and torch itself make most of the
rest. None of it can be left out without changing what the cell runs (bitsandbytes' compiled kernels are the nf4
cells' CPU path), so it is paid once per run here.
"""


def cpu() -> None:
    import bench.worker.__main__  # noqa: F401  (its module: its main runs as __main__ only)
    from bench.isolation import cgroups, progress  # noqa: F401
    from bench.worker import build, engage, faults, measure, memory, models, nvml, placement, trainer_args  # noqa: F401
    from bench.worker.stages import dpo  # noqa: F401

    for name in ("transformers", "datasets", "trl", "peft", "accelerate"):
        __import__(name)
    from trl import DPOTrainer  # noqa: F401


def accelerator() -> None:
    """Only what imports without touching a GPU: bitsandbytes (through peft, which trl and transformers' Trainer
    import) reads the devices' compute capability at import, which initialises CUDA, and a CUDA context does not
    survive a fork."""
    for name in ("torch", "transformers", "transformers.modeling_utils", "datasets", "accelerate"):
        __import__(name)
