"""How a test holds a refitted constant (or a figure derived from one) to its committed value: within a stated
tolerance, never exactly.

A fit's last digits are the CPU's, not the data's: the solvers call BLAS/LAPACK, and OpenBLAS picks its kernels per
CPU at load time. The committed speed calibration was fitted with OpenBLAS's SkylakeX kernels (an AMD EPYC Zen 4);
`OPENBLAS_CORETYPE=Haswell` (or `Zen`) gives, digit for digit, the GPU constants an AMD EPYC Zen 5 reported
(layer_pass_s 0.001230972484601539 -> 0.0012309724846015391), `Sandybridge` moves a CPU constant's range in the 16th
digit. Moving every measured step time by 1e-12 of itself moves the fitted constants by under 1e-11 of themselves.
"""

import math
from typing import Any

from pydantic import BaseModel

REL = 1e-9
"""Relative tolerance: a hundred times what a 1e-12 relative change of the inputs does to the fits, and a thousand
times below the noise of any measured input (step times and memory to 1e-6 at best), so a real refit is caught."""
ABS = 1e-12
"""Absolute floor, in the figure's own unit (seconds per step, call or layer pass; bytes; a log or relative error):
what a constant at or near 0 is compared with. A relative tolerance means nothing there: a constant a solver leaves
a hair from its bound 0 (the GPU step overhead under lsq_linear's trust-region method: 5.1369866861007194e-20 s with
one CPU's BLAS, 5.137004699897262e-20 with another's) differs by 3.5e-6 of itself, and by 2e-25 s, which no step
can tell. The fit takes such a constant at its bound, 0.0 (speed_validation.fit_gpu)."""


def mismatches(got: Any, want: Any, rel: float = REL, abs_tol: float = ABS, where: str = "") -> list[str]:
    """Where `got` differs from `want` (pydantic models, dicts, lists, numbers, anything else compared with ==):
    numbers beyond `rel` of `want` and `abs_tol`, everything else by equality. Empty when they agree."""
    if isinstance(got, BaseModel) and isinstance(want, BaseModel):
        return mismatches(got.model_dump(), want.model_dump(), rel, abs_tol, where)
    if isinstance(got, dict) and isinstance(want, dict):
        if set(got) != set(want):
            return [f"{where or '.'}: keys {sorted(got)} != {sorted(want)}"]
        return [m for k in want for m in mismatches(got[k], want[k], rel, abs_tol, f"{where}.{k}")]
    if isinstance(got, list | tuple) and isinstance(want, list | tuple):
        if len(got) != len(want):
            return [f"{where or '.'}: {len(got)} items != {len(want)}"]
        return [
            m
            for i, (g, w) in enumerate(zip(got, want, strict=True))
            for m in mismatches(g, w, rel, abs_tol, f"{where}[{i}]")
        ]
    if _number(got) and _number(want):
        close = math.isclose(got, want, rel_tol=rel, abs_tol=abs_tol)
        return [] if close else [f"{where or '.'}: {got!r} != {want!r}"]
    return [] if got == want else [f"{where or '.'}: {got!r} != {want!r}"]


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
