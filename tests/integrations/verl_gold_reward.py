"""The verl layout test's reward: mtsql's own ``compute_score`` plus the share of ASCII letters in the gold
SQL.

Its rollouts are greedy (so that one and two vLLM engines generate the same tokens), and the tiny random
model then writes the same text for every prompt; a term of the gold query still differs between prompts, so
the advantages (whitened over the batch) are not all zero and the update is real. verl loads it by file path
(``reward.custom_reward_function.path``)."""

from mtsql.engines.verl.reward import compute_score as mtsql_score


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    scores = mtsql_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
    gold = str(ground_truth)
    letters = sum(char.isascii() and char.isalpha() for char in gold) / max(len(gold), 1)
    return {**scores, "score": scores["score"] + letters}
