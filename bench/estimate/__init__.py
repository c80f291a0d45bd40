"""Memory estimator: per-device peak memory of a DPO cell from configs only (meta device), against usable memory.

shapes (parameter counts by role) -> terms (one pure function per memory term) -> predict (cell + profile + workload
-> Prediction) ; calibrate (constants fitted on measured records) ; validate (prediction vs every measurement).
"""

VERSION = "0.3.0"
