"""The SFT -> merge -> DPO -> merge -> generate pipeline, in the optimum-habana guide's order: LoRA SFT on the
workload's base checkpoint, its adapter merged into the base, DPO (LoRA) from the merged checkpoint, that adapter
merged in turn, and a fixed number of tokens generated from the final model after a fixed prompt.

Every stage is a real process of its own, run by the executor with the profile's time limit: the two training
stages are matrix cells (`sft-one_adapter-none-single`, `one_adapter-none-single`: the worker, its learning check
and engagement, bench/run/one_cell.py), the merges and the generation are bench/worker/pipeline_step.py. Each stage's
record (bench/results/schema.py StageRecord) is written as soon as it ends, one JSON file per stage under
results/<HW>/pipelines/<run-id>/stages/; a stage that does not end `ok` stops the chain, and every later stage is
recorded `not_run` with the stage that stopped it. The models the stages hand on live under build/pipelines/.
"""
