"""Benchmark specs shipped with rewardlab (installed as ``rewardlab.evals``).

One YAML file per benchmark: data source (hub id and local file name), split, prompt template
(zero-shot or few-shot, chat or plain), grader, sampling defaults and metrics. See README.md here;
:func:`rewardlab.evaluate.load_spec` reads them, and ``rewardlab eval --spec FILE`` takes a user's own.
"""
