"""``rewardlab eval``: evaluate a model or checkpoint, or compare two results files.

    rewardlab eval default --suite gsm8k,math500,humaneval --limit 50
    rewardlab eval runs/x/checkpoints/step-000200 --suite gsm8k --output evals/step200
    rewardlab eval --compare before/results.json after/results.json --plot delta.png

Every setting is a field of :class:`rewardlab.eval.EvalConfig`; its options here are generated from
the fields (:func:`config_options`), with each field's docstring as the help. See
:mod:`rewardlab.eval` for what is recorded and how resume works.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from typing import Any, Callable

import click

from rewardlab.errors import RewardlabError
from rewardlab.eval import RESULTS_FILE, compare_results, format_compare, format_table, plot_compare, run_eval
from rewardlab.eval.config import DEFAULT_SUITE, EvalConfig, field_docs  # noqa: F401 - DEFAULT_SUITE: public name here


def _option(f: dataclasses.Field, hint: Any, doc: str) -> Callable[[Callable], Callable]:
    """The click option of one :class:`EvalConfig` field: ``--field-name``, typed by its annotation."""
    meta = f.metadata
    decls = [f"--{f.name.replace('_', '-')}", *meta.get("aliases", ()), f.name]
    args = set(typing.get_args(hint)) - {type(None)} or {hint}
    kw: dict[str, Any] = {"default": f.default, "help": doc}
    if bool in args:
        kw["is_flag"] = True
    elif "choices" in meta:
        kw["type"] = click.Choice(list(meta["choices"]))
    elif "path" in meta:
        kw["type"] = click.Path(file_okay=meta["path"] != "dir", dir_okay=meta["path"] != "file")
    elif int in args or float in args:
        kw["type"] = int if int in args else float
    if typing.get_origin(hint) is tuple:
        kw["multiple"] = True
    kw["show_default"] = f.default is not None and not isinstance(f.default, (bool, tuple))
    return click.option(*decls, **kw)


def config_options(fn: Callable) -> Callable:
    """Decorate ``fn`` with one option per command-line field of :class:`EvalConfig`, in :func:`field_docs`' order
    (the fields', with the tool settings after ``--tools``)."""
    hints = typing.get_type_hints(EvalConfig)
    docs = field_docs()
    fields = {f.name: f for f in dataclasses.fields(EvalConfig)}
    for name in reversed(list(docs)):
        if fields[name].metadata.get("cli", True):
            fn = _option(fields[name], hints[name], docs[name])(fn)
    return fn


def _set_threads(cfg: EvalConfig) -> None:
    """``--threads``, or training's default (:func:`rewardlab.train.process.default_threads`), for a CPU model."""
    from rewardlab.train.process import default_threads  # lazy: --help and typos stay fast (torch)

    nthreads = cfg.threads if cfg.threads is not None else default_threads()
    if nthreads is not None and cfg.device == "cpu":
        import torch

        torch.set_num_threads(nthreads)


def _compare(compare: tuple[str, str], plot: str | None, as_json: bool) -> None:
    cmp = compare_results(*compare)
    click.echo(json.dumps(cmp, indent=2) if as_json else format_compare(cmp))
    if plot:
        path = plot_compare(cmp, plot)
        if not as_json:
            click.echo(f"chart: {path}")


@click.command("eval")
@click.argument("model", required=False)
@config_options
@click.option("--compare", nargs=2, type=str, default=None, metavar="A.json B.json",
              help="Compare two runs (paired on the same problems) instead of evaluating; a side may list "
                   "several results files of one model separated by commas.")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="With --compare: write a PNG bar chart here.")
@click.option("--json", "as_json", is_flag=True, help="Print the results (or comparison) as JSON instead of a table.")
def eval_cmd(model: str | None, compare: tuple[str, str] | None, plot: str | None, as_json: bool,
             **settings: Any) -> None:
    """Evaluate MODEL (hub id, checkpoint folder, run directory, or 'default') on a benchmark suite."""
    if compare:
        if model:
            raise RewardlabError("--compare takes two results files, not a model")
        _compare(compare, plot, as_json)
        return
    if plot:
        raise RewardlabError("--plot goes with --compare A.json B.json")
    cfg = EvalConfig(**settings)
    cfg.grader_names()  # a typo fails before any model load
    if not model:
        raise RewardlabError("missing MODEL: a hub id, a checkpoint folder, a run directory, or 'default'")
    _set_threads(cfg)
    results = run_eval(cfg, model)
    if as_json:
        click.echo(json.dumps(results, indent=2, default=str))
    else:
        click.echo(format_table(results))
        click.echo(f"results: {cfg.out_dir(model) / RESULTS_FILE}")
