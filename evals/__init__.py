"""Benchmark specs shipped with rewardlab (installed as ``rewardlab.evals``).

One YAML file per benchmark: the ``rewardlab.tasks`` task whose rows, gold answers and prompt it
evaluates, chat / system choice, grader, sampling defaults and metrics. See README.md here;
:func:`rewardlab.eval.load_spec` reads them, and ``rewardlab eval --spec FILE`` takes a user's own.
"""
