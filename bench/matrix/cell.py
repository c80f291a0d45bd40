"""A cell of the matrix: one init x quant x backend combination with its launcher, world size, options and setup, and
its id."""

from pydantic import BaseModel, Field

from bench.matrix.axes import Backend, Init, Launcher, Method, Option, Quant, Setup
from bench.matrix.backends import backend_spec
from bench.matrix.inits import init_spec
from bench.matrix.yaml_schema import Strict


def base_cell_id(init: str, quant: str, backend: str, method: str = Method.DPO) -> str:
    """`init-quant-backend`, prefixed `<method>-` where the method is not DPO."""
    prefix = "" if method == Method.DPO else f"{method}-"
    return f"{prefix}{init}-{quant}-{backend}"


def method_of_id(cell_id: str) -> Method:
    """The training method a cell id names: its prefix where that is a method (base_cell_id), else DPO."""
    head = cell_id.split("-", 1)[0]
    return Method(head) if head in set(Method) else Method.DPO


def quant_of_id(cell_id: str) -> str:
    """The quantization a cell id names (base_cell_id's second field after any method prefix); "" where the id has
    no such field."""
    fields = cell_id.split("+", 1)[0].split("-")
    if fields[0] in set(Method):
        fields = fields[1:]
    return fields[1] if len(fields) > 2 else ""


def is_variant_id(cell_id: str, init: str, quant: str, backend: str, method: str = Method.DPO) -> bool:
    """A row with another launcher, world size, options or the newcomer setup: its id carries a `+` suffix beyond
    [method-]init-quant-backend."""
    return cell_id != base_cell_id(init, quant, backend, method)


class Cell(Strict):
    init: Init
    quant: Quant
    backend: Backend
    launcher: Launcher
    ranks: int | None = Field(default=None, ge=1)
    """World size of a multi-process backend when the row fixes it (`+1rank`: an offload backend on one device);
    None: the profile's `processes`."""
    options: tuple[Option, ...] = ()
    setup: Setup = Setup.RECIPE
    """The documented recipe (no suffix, as every cell before setups existed) or `+newcomer`."""
    method: Method = Method.DPO
    """The training method: a prefix of the id where it is not DPO, so every DPO id stays as it was."""

    @property
    def id(self) -> str:
        suffix = ""
        if self.launcher != backend_spec(self.backend).default_launcher:
            suffix += f"+{self.launcher}"
        if self.ranks is not None:
            suffix += f"+{self.ranks}rank"
        for option in sorted(self.options):
            suffix += f"+{option}"
        if self.setup != Setup.RECIPE:
            suffix += f"+{self.setup}"
        return base_cell_id(self.init, self.quant, self.backend, self.method) + suffix

    @property
    def base_id(self) -> str:
        """The init x quant x backend cell this one is a variant of (itself for a base cell), without the method."""
        return base_cell_id(self.init, self.quant, self.backend)

    @property
    def is_variant(self) -> bool:
        return is_variant_id(self.id, self.init, self.quant, self.backend, self.method)

    @property
    def uses_adapters(self) -> bool:
        return init_spec(self.init).adapters


class CellAxes(BaseModel):
    """A cell as a result record, a prediction and an advice entry name it: its id, and the axes a reader (of a CSV,
    a JSON line) places it by in a matrix without parsing the id. Each of them extends this one model."""

    cell_id: str
    method: str = Method.DPO.value
    """The training method; records from before methods were an axis are DPO's."""
    init: str
    quant: str
    backend: str

    @staticmethod
    def of(cell: Cell) -> dict[str, str]:
        """The fields of `cell`, for the constructor of a model that extends this one."""
        return {
            "cell_id": cell.id,
            "method": str(cell.method),
            "init": str(cell.init),
            "quant": str(cell.quant),
            "backend": str(cell.backend),
        }
