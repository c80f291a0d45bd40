"""The speed model: PREDICTED seconds per step and tokens/s of a cell, each term a pure function with its source
(docs/estimator.md, "Speed"). `devices.py` the device figures, `work.py` FLOPs and bytes per step, `comm.py` the
collectives, `model.py` the step time, `calibration.py` the constants and what they were fitted on, `validate.py`
the model held against every measured CPU cell and the published rows."""
