"""Asking a person before a tool call runs (the policy's ``confirm`` effect).

* :mod:`~proxy.enforce.confirm.question`: the question (which tool, which server, the arguments
  summarised with secrets masked, the rule's reason), and reading the answer. Pure.
* :mod:`~proxy.enforce.confirm.memory`: approvals remembered for a session or some minutes, and the
  single-use ids of questions asked through ``input_required``.
* :class:`proxy.pipeline.stages.confirm.Confirm`: the pipeline stage that asks and enforces.
"""
