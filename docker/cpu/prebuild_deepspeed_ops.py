"""Build the DeepSpeed host ops the cells use, once, into $TORCH_EXTENSIONS_DIR (make setup, the cpu and cuda images).

DeepSpeed JIT-builds an op at its first use (1-2 min on 2 cores): inside a timed cell that would count as
training time, two ranks building at once wait on one lock file, and a container removed after its cell would build
it again for the next one. Each op is built as DeepSpeed's accelerator (DS_ACCELERATOR, else detected) provides it:
- ShareMemCommBuilder: the CPU accelerator's shared-memory all-reduce (every ZeRO cell on CPU; CUDA has none).
- CPUAdamBuilder: DeepSpeedCPUAdam, the optimizer of ZeRO with optimizer offload (zero3_offload). The cuda
  accelerator hands out the CPU builder itself (deepspeed/accelerator/cuda_accelerator.py), so the cuda image builds
  it without a GPU, under the same name and flags a GPU run loads.
"""

from deepspeed.accelerator import get_accelerator

OPS = ("ShareMemCommBuilder", "CPUAdamBuilder")

for op in OPS:
    builder = get_accelerator().create_op_builder(op)
    if builder is None:
        print(f"{op}: not used on {get_accelerator().device_name()}")
        continue
    builder.load()
    print(f"built {op}")
