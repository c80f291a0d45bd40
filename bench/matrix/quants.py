"""The quantization table: one entry per quantization, read by the N/A rules, the worker, engagement and the
estimator."""

from dataclasses import dataclass

from bench.matrix.axes import Quant


@dataclass(frozen=True)
class QuantSpec:
    name: Quant
    layer_class: str | None
    """bitsandbytes' layer class engagement must find in the model; None: not quantized."""
    bytes_per_weight: float = 0.0
    """Stored bytes per quantized weight, its scales left out (bitsandbytes int8: one byte; nf4: half); 0 where not
    quantized (the weights keep the training precision). The memory terms add the scales
    (bench/estimate/terms.py), the speed model reads the weights at this size, advise ranks by it."""

    @property
    def quantized(self) -> bool:
        """Quantized weights are frozen: they train only through adapters, and need bitsandbytes."""
        return self.layer_class is not None


QUANTS: dict[Quant, QuantSpec] = {
    spec.name: spec
    for spec in (
        QuantSpec(Quant.NONE, layer_class=None),
        QuantSpec(Quant.INT8, layer_class="Linear8bitLt", bytes_per_weight=1.0),
        QuantSpec(Quant.NF4, layer_class="Linear4bit", bytes_per_weight=0.5),
    )
}


def quant_spec(quant: Quant | str) -> QuantSpec:
    return QUANTS[Quant(quant)]
