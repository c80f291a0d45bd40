"""The lengths a run's rows take, where its data states them: the input of the caching allocator's history term
(bench/estimate/gpu_terms.py `earlier_records`)."""

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class LengthSpread(BaseModel):
    """The rows a run trains on, as a source states them: their tokens' mean and standard deviation (a log-normal
    of those moments), how many rows there are, what a row above max_length becomes (`delete`: dropped, as
    swift's `truncation_strategy`; `truncate`: cut to max_length), and the run's steps where it states them (else
    one epoch over the rows kept)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mean: float = Field(gt=0)
    sd: float = Field(ge=0)
    rows: int = Field(ge=1)
    over_max: Literal["delete", "truncate"] = "delete"
    steps: int | None = Field(default=None, ge=1)


def synthetic_spread(prompt_median: float, answer_median: float, sigma: float, rows: int, steps: int) -> LengthSpread:
    """A row of bench/assets/synthetic_prefs.py: a prompt and an answer, each median x LogNormal(0, sigma), cut to
    max_length. Their sum's mean and variance (each log-normal's e^(s^2/2) and e^(s^2)(e^(s^2) - 1) times its median
    squared), taken as one log-normal of those moments (Fenton-Wilkinson)."""
    scale = math.exp(sigma**2 / 2)
    variance = (prompt_median**2 + answer_median**2) * math.exp(sigma**2) * (math.exp(sigma**2) - 1)
    return LengthSpread(
        mean=(prompt_median + answer_median) * scale,
        sd=math.sqrt(variance),
        rows=rows,
        over_max="truncate",
        steps=steps,
    )
