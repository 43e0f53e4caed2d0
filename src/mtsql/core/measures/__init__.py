"""Research measures of an evaluation, beyond the official EX / EM: each is a plain function of scored
rows or official items, written into the evaluate stage's ``metrics.json`` and read by the report.

* ``pass_at_k``: the unbiased pass@k estimator from n samples per turn, by hardness and turn.
* ``verdicts``: calibration of the agent's ``<exec_verify>`` / ``<memory_verify>`` verdicts against
  EX, and whether its next action followed them.
* ``revisions``: queries revised after a no_pass verdict (wrong to right, right to wrong), and turns
  whose execution failed that still ended right.
* ``propagation``: EX of turn k given that turn k-1 was right or wrong.
* ``vacuous``: gold queries whose result is empty (or all NULL), and EX without them.
* ``cost``: generated and prompt tokens, SQL executions, messages and seconds per turn.
"""
