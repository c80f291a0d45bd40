"""Host memory is a limit like device memory: what the offload cells keep in the host memory of one node, held
against that node's memory (`--host-ram`, else the GPU catalog's typical node carrying the GPU).

What is counted is the estimator's `host_bytes` (bench/estimate/predict.py): per rank, the state an offload backend
keeps on the host (parameters, gradients, optimizer states, offload buffers, an offloaded reference model), times
the ranks the cell runs on the node. Not counted: the model's load on the host before it is sharded (without
accelerate's cpu_ram_efficient_loading every rank reads a whole copy first), the libraries' own resident memory, the
operating system and pinned staging buffers."""

from dataclasses import dataclass

from bench.estimate.predict import Prediction
from bench.matrix.gpus import gpu as catalog_gpu
from bench.matrix.profiles import HardwareProfile
from bench.units import GB


@dataclass(frozen=True)
class HostMemory:
    bytes_per_node: float
    origin: str
    """`--host-ram` or `catalog`."""
    system: str | None = None
    """The catalog's node (origin catalog): the server or instance the figure is read from."""
    system_gb: float | None = None
    system_gpus: int | None = None

    def describe(self, devices_per_node: int) -> str:
        """How the figure was chosen, for the advice's header."""
        if self.origin != "catalog":
            return "--host-ram"
        share = "" if self.system_gpus == devices_per_node else f", pro rata for {devices_per_node}"
        return (
            f"catalog default: {self.system}, {self.system_gb:,.0f} GB for {self.system_gpus} GPUs{share}; "
            "--host-ram to change"
        )


def host_memory(profile: HardwareProfile, host_ram_gb: float | None) -> HostMemory | None:
    """The host memory of one node: `--host-ram` GB, else the catalog's node for the profile's GPU, its memory per
    GPU times the GPUs per node; None where neither is known (a GPU the catalog has no server figure for): then
    the offload cells are marked host unchecked, not refused."""
    if host_ram_gb is not None:
        return HostMemory(host_ram_gb * GB, "--host-ram")
    if profile.gpu is None:
        return None
    node = catalog_gpu(profile.gpu).host_node
    if node is None:
        return None
    return HostMemory(node.per_gpu_gb() * profile.device_count * GB, "catalog", node.system, node.memory_gb, node.gpus)


def ranks_on_node(prediction: Prediction, profile: HardwareProfile) -> int:
    """The cell's processes on one node (a process that splits the layers over the devices is one)."""
    return max(1, min(prediction.world_size, profile.device_count))


def host_need(prediction: Prediction, profile: HardwareProfile) -> float:
    """Host bytes the cell needs on one node: `host_bytes` per rank times its ranks there (0 without offload)."""
    return prediction.host_bytes * ranks_on_node(prediction, profile) if prediction.host_bytes else 0.0


def over_host(prediction: Prediction, profile: HardwareProfile, host: HostMemory | None) -> bool:
    """The cell offloads more to the host of a node than the node has."""
    return host is not None and host_need(prediction, profile) > host.bytes_per_node


def verdict(prediction: Prediction, profile: HardwareProfile, host: HostMemory | None) -> str:
    """The device's verdict, or host_oom where the device would hold the cell and the host memory of a node would
    not (a cell over both stays oom: the device is the first limit)."""
    device = prediction.verdict or "unknown"
    return "host_oom" if device != "oom" and over_host(prediction, profile, host) else device


def unchecked(prediction: Prediction, host: HostMemory | None) -> bool:
    """An offload cell with no host memory figure to hold it against (no --host-ram, no catalog node for the GPU):
    its device verdict stands and its host need is shown, marked "host unchecked"."""
    return host is None and prediction.status == "predicted" and prediction.host_bytes > 0
