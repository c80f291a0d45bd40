"""A step's peak tensor memory by category, from torch's MemTracker (torch.distributed._tools.mem_tracker): every
tensor's storage attributed to parameters, buffers, gradients, activations, temporaries (the backward's) or
optimizer state, and the peak over the step."""

from typing import Any

from bench.estimate.trace.step import Step, run_step

CATEGORIES = {
    "PARAM": "params",
    "BUFFER": "buffers",
    "GRAD": "grads",
    "ACT": "activations",
    "TEMP": "temp",
    "OPT": "optimizer",
    "OTH": "other",
}


class _Removed:
    """The hook handle MemTracker keeps for a parameter it must not hook."""

    def remove(self) -> None:
        return None


def _tracker_class() -> type:
    from torch.distributed._tools.mem_tracker import MemTracker

    class StepTracker(MemTracker):  # type: ignore[misc, valid-type]
        """MemTracker that accepts a root module called twice in one step: DPO's policy forward and its reference
        forward through the same model with the adapter disabled. The stock tracker takes a second root call for
        the next iteration and raises; here the root's per-module record starts again (the device-wide peak that
        is read is kept)."""

        def _pre_fw_hook(self, module: Any, inputs: Any) -> None:
            name = self._mod_tracker.get_known_fqn(module)
            parents = set(self._mod_tracker.parents) - {name}
            if module in self.memory_tracking and not self._mod_tracker.is_bw and parents == {"Global"}:
                del self.memory_tracking[module]
            super()._pre_fw_hook(module, inputs)

    return StepTracker


def tracked_peak(step: Step) -> dict[str, int]:
    """The step's peak by category, in bytes, and `total` (their sum): the second optimizer step under the tracker,
    the optimizer's state already made. Frozen parameters get no gradient hook (the stock tracker would try one and
    fail on a LoRA model's base weights)."""
    tracker = _tracker_class()()
    model, optimizer = step.trainer.model, step.trainer.optimizer
    for param in model.parameters():
        if not param.requires_grad:
            tracker._param_to_grad_hook_handles[param] = (_Removed(), _Removed())
    with step.context():  # outside the tracker: a fake step's mode makes the tensors the tracker then sees
        run_step(step)  # AdamW makes its state in the first update: the tracked step is a steady one
        tracker.track_external(model, optimizer)
        with tracker:
            run_step(step)
    peaks = tracker.get_tracker_snapshot("peak")
    device = next(iter(peaks.values()))
    out = {CATEGORIES[str(key).rsplit(".", 1)[-1]]: int(value) for key, value in device.items() if key != "Total"}
    return out | {"total": int(device["Total"])}
