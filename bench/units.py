"""Byte units, stated once: every figure the suite prints or stores in MiB, GiB or GB divides by these, and
`bytes_text` writes a byte figure as text."""

KiB = 2**10
MiB = 2**20
GiB = 2**30

MB = 1e6
GB = 1e9
"""Decimal units: the vendors' (a '24 GB' card, memory_per_device_gb, GB/s) and the tables that speak to people."""

UNITS = {"KiB": KiB, "MiB": MiB, "GiB": GiB, "MB": MB, "GB": GB}


def bytes_text(value: float | None, unit: str, digits: int, *, sign: bool = False, suffix: bool = True) -> str:
    """`value` bytes in `unit`, with thousands separators and `digits` decimals (`1,372.5 MiB`); `sign`: always
    signed (`+12 MiB`); `suffix`: the unit's name after the number. None: `—`."""
    if value is None:
        return "—"
    number = f"{value / UNITS[unit]:{'+' if sign else ''},.{digits}f}"
    return f"{number} {unit}" if suffix else number
