"""Byte units, stated once: every figure the suite prints or stores in MiB or GiB divides by these."""

KiB = 2**10
MiB = 2**20
GiB = 2**30
