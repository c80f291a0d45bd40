"""Build the DeepSpeed ops the CPU cells use, once, into $TORCH_EXTENSIONS_DIR (make setup and the cpu image).

DeepSpeed JIT-builds an op at its first use (1-2 min on 2 cores): inside a timed cell that would count as
training time, and two ranks building at once wait on one lock file.
- ShareMemCommBuilder: the CPU accelerator's shared-memory all-reduce (every ZeRO cell).
- CPUAdamBuilder: DeepSpeedCPUAdam, the optimizer ZeRO uses with optimizer offload (zero3_offload).
"""

from deepspeed.accelerator import get_accelerator

OPS = ("ShareMemCommBuilder", "CPUAdamBuilder")

for op in OPS:
    get_accelerator().create_op_builder(op).load()
    print(f"built {op}")
