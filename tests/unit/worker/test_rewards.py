from bench.worker.rewards import REWARD_METRIC, target_token_share


def test_the_reward_is_the_share_of_even_token_ids_of_each_completion():
    rewards = target_token_share(completion_ids=[[2, 4, 5, 7], [1, 3], [0], []], prompts=["a"] * 4, completions=[""])
    assert rewards == [0.5, 0.0, 1.0, 0.0]


def test_its_metric_is_the_name_trl_logs_the_function_under():
    assert REWARD_METRIC == "rewards/target_token_share/mean"
