"""StepRecorder: what the worker reads back after training, and the first-step hook it attaches afterwards."""

import types

from bench.worker.measure import StepRecorder


def test_recorder_times_every_step_and_calls_the_first_step_hook_once():
    recorder = StepRecorder()
    recorder.trainer = types.SimpleNamespace(_total_train_tokens=0)
    calls: list[int] = []
    recorder.on_first_step = lambda: calls.append(len(recorder.step_ends))
    recorder.on_train_begin(None, None, None)
    for tokens in (100, 250):
        recorder.trainer._total_train_tokens = tokens
        recorder.on_step_end(None, None, None)
    assert calls == [1]
    assert recorder.tokens == [100, 250]
    assert recorder.train_start is not None and recorder.train_start <= recorder.step_ends[0] <= recorder.step_ends[1]
    assert len(recorder.memory_now) == 2 and all(value > 0 for value in recorder.memory_now)


def test_trainers_without_a_token_count_of_their_own_get_the_batches_counted():
    import torch

    from bench.worker.measure import ACCURACY_METRICS, batch_tokens, record_losses, train_metric

    paired = {
        "chosen_attention_mask": torch.tensor([[1, 1, 1, 0]]),
        "rejected_attention_mask": torch.tensor([[1, 1, 0, 0]]),
        "prompt_attention_mask": torch.tensor([[1, 1]]),  # inside chosen and rejected already
    }
    assert int(batch_tokens(paired)) == 5 and int(batch_tokens({"attention_mask": torch.ones(2, 3)})) == 6

    class ExperimentalTrainer:  # ORPO / CPO: no _total_train_tokens, metrics in _stored_metrics
        model = types.SimpleNamespace(training=True)
        accelerator = types.SimpleNamespace(gather_for_metrics=lambda t: t.reshape(1))
        _stored_metrics = {"train": {"rewards/accuracies": [0.25, 0.75]}}

        def compute_loss(self, model, inputs, num_items_in_batch=None):
            return torch.tensor(0.5)

    trainer, recorder = ExperimentalTrainer(), StepRecorder()
    record_losses(trainer, recorder)
    trainer.compute_loss(None, paired)
    trainer.compute_loss(None, paired)
    recorder.trainer = trainer
    recorder.on_step_end(None, None, None)
    assert recorder.tokens == [10] and recorder.losses == [0.5, 0.5] and recorder.reward_accuracies == [0.75]
    assert train_metric(types.SimpleNamespace(_metrics={"train": {"accuracy": [0.5]}}), ACCURACY_METRICS) == 0.5
    assert train_metric(types.SimpleNamespace(), ACCURACY_METRICS) is None


def test_a_generation_serving_two_steps_records_its_reward_once():
    from types import SimpleNamespace

    from bench.worker.measure import StepRecorder
    from bench.worker.rewards import REWARD_METRIC

    recorder = StepRecorder()
    logged: list[float] = []
    rule: list[float] = []
    model: list[float] = []
    metrics = {REWARD_METRIC: logged, "rewards/target_token_share/mean": rule, "rewards/rm/mean": model}
    recorder.trainer = SimpleNamespace(_metrics={"train": metrics | {"rewards/rm/std": [1.0]}})
    for generated in (0.5, None, 0.75, None):
        if generated is not None:
            logged.append(generated)
            rule.append(generated - 0.25)
            model.append(0.25)
        recorder._record_generation()
    assert recorder.sampled_rewards == [0.5, 0.75]
    assert recorder.reward_parts == {"target_token_share": [0.25, 0.5], "rm": [0.25, 0.25]}
