"""The verl training test's reward: mtsql's own ``compute_score`` plus a term that differs between the
samples of a group even when the tiny random model never answers (the share of the decoded response's
characters that are ASCII letters), so that GRPO's advantages are not all zero and the update is real.
verl loads it by file path (``reward.custom_reward_function.path``)."""

from mtsql.engines.verl.reward import compute_score as mtsql_score


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    scores = mtsql_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
    letters = sum(char.isascii() and char.isalpha() for char in solution_str) / max(len(solution_str), 1)
    return {**scores, "score": scores["score"] + letters}
