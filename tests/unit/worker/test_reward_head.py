"""The reward model's score head starts at zero on every rank, also where transformers left it on the meta device
(accelerate's FSDP launch with cpu_ram_efficient_loading, on the ranks but the first)."""

import torch

from bench.worker.trainers import reward


class Scored(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Linear(4, 4)
        self.score = torch.nn.Linear(4, 1, bias=False, device="meta")


def test_a_head_left_on_meta_gets_storage_on_the_models_device_and_the_rest_is_untouched():
    model = Scored()
    body = model.body.weight.detach().clone()
    reward._materialised_heads(model)
    assert model.score.weight.device.type == "cpu" and model.body.weight.device.type == "cpu"
    assert torch.equal(model.body.weight, body)
    head = reward.head_parameters(model)
    assert head == [model.score.weight]
    reward._zeroed(head)
    assert torch.count_nonzero(model.score.weight) == 0 and torch.equal(model.body.weight, body)
    model.to("cpu")  # what the trainer's _move_model_to_device does; a meta head fails here


def test_a_loaded_head_is_left_where_it_is():
    model = Scored()
    model.score = torch.nn.Linear(4, 1, bias=False)
    weight = model.score.weight
    reward._materialised_heads(model)
    assert model.score.weight is weight
