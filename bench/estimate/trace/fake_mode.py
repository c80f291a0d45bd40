"""Fake tensors for a step too large to run: torch's FakeTensorMode (shapes, dtypes, devices, no data), with
what a whole TRL step needs beside the model's ops.

- The batch stays real: an op whose tensors are all real (the collator's ids and masks, what the step derives from
  them) runs for real, so every branch and shape that hangs on the batch is the real one; a real boolean mask
  indexes a fake tensor at its real positions.
- A read of fake data (a metric's `.item()`, `if total_tokens > 0`) stands in as 1 or True, a `nonzero` of fake
  data as every element set: they reach the logged metrics only.
- `Module.to` swaps a fake parameter for its copy (torch/nn/modules/module.py `_apply`), which `swap_tensors`
  refuses while the converter's memo holds a weak reference to it: `fake_parameters` empties that memo first."""

import contextlib
from collections.abc import Iterator
from typing import Any


def _long_indices(indices: list[Any]) -> list[Any]:
    """`indices` with each real boolean mask replaced by its real positions (what indexing by a mask means)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    out: list[Any] = []
    for index in indices:
        if index is not None and not isinstance(index, FakeTensor) and index.dtype in (torch.bool, torch.uint8):
            out.extend(index.nonzero(as_tuple=True))
        else:
            out.append(index)
    return out


def stand_in_mode() -> Any:
    """A FakeTensorMode (allowing real inputs) that, once `real_through` is set, runs all-real ops for real and
    answers reads of fake data with stand-ins (the module's docstring). Built here: torch is imported on use."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    from torch.utils._pytree import tree_leaves

    aten = torch.ops.aten
    indexing = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default, aten._unsafe_index.Tensor}

    class StandInMode(FakeTensorMode):
        real_through = False

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            tensors = [x for x in tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
            if self.real_through and tensors and not any(isinstance(x, FakeTensor) for x in tensors):
                return func(*args, **kwargs)
            if func in indexing:
                args = (args[0], _long_indices(list(args[1])), *args[2:])
            if func is aten._local_scalar_dense.default:
                dtype = args[0].dtype
                return True if dtype == torch.bool else 1.0 if dtype.is_floating_point else 1
            if func is aten.nonzero.default:
                with self:
                    return torch.empty((args[0].numel(), args[0].dim()), dtype=torch.long, device=args[0].device)
            return super().__torch_dispatch__(func, types, args, kwargs)

    return StandInMode(allow_non_fake_inputs=True)


@contextlib.contextmanager
def fake_parameters(mode: Any) -> Iterator[None]:
    """While building under `mode`: `Module.to` can swap fake parameters (the module's docstring)."""
    import torch

    original = torch.utils.swap_tensors

    def swap(first: Any, second: Any) -> None:
        mode.fake_tensor_converter.meta_converter.tensor_memo.clear()
        original(first, second)

    torch.utils.swap_tensors = swap
    try:
        yield
    finally:
        torch.utils.swap_tensors = original
