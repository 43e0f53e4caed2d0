"""The slices results and curricula are cut by: the official hardness levels and the evaluators'
turn buckets (the rows of the by-hardness and by-turn tables), and the labels each
``curriculum.by`` can give an item of the RL pool."""

HARDNESS_LEVELS = ("easy", "medium", "hard", "extra")
TURN_BUCKETS = ("1", "2", "3", "4", ">4")  # the evaluators print them as "turn 1" ... "turn >4"
PASS_RATE_BANDS = ("high", "low", "zero")  # share of an item's samples solved: >= 0.5, > 0, 0
CURRICULUM_LABELS = {"hardness": HARDNESS_LEVELS, "turn": TURN_BUCKETS, "pass_rate": PASS_RATE_BANDS}
