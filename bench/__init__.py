"""dpo-bench: which DPO training setups work on given hardware, how fast, and how much memory they take."""

__version__ = "0.1.0"
