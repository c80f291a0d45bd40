from bench.worker.rewards import PART_PREFIX, PART_SUFFIX, REWARD_METRIC, target_token_share


def test_the_reward_is_the_share_of_even_token_ids_of_each_completion():
    rewards = target_token_share(completion_ids=[[2, 4, 5, 7], [1, 3], [0], []], prompts=["a"] * 4, completions=[""])
    assert rewards == [0.5, 0.0, 1.0, 0.0]


def test_the_checked_metric_is_trls_total_and_the_rule_is_one_part_of_it():
    assert REWARD_METRIC == "reward"
    assert f"{PART_PREFIX}{target_token_share.__name__}{PART_SUFFIX}" == "rewards/target_token_share/mean"
