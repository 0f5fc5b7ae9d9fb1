"""reasoning-gym as an environment: ``reasoning_gym:NAME[?size=N&seed=S&answer=tag|boxed|text&<config>]``.

Any of reasoning-gym's procedural datasets (``rewardlab envs list``) becomes rows for ``train`` and
``eval``: its question as the user message, followed by the answer-format instruction, and its entry
as the reference. The reward is the dataset's own ``score_answer`` on the extracted answer, so a run
here scores exactly what reasoning-gym scores.

Options: ``size`` (rows generated; default 1,000 for train and 200 for test), ``seed`` (default: the
run's seed), ``answer`` (how the answer is marked: ``tag``, reasoning-gym's ``<answer>...</answer>``,
the default; ``boxed``, ``\\boxed{...}``; ``text``, the whole completion), ``allow_degenerate`` (use a
dataset whose scorer pays a nonsense answer, :data:`PROBE`; refused by default), and any field of the
dataset's config (``min_word_len=3``). The train and test splits are generated from two different
seeds derived from the one given; a small task space can still repeat a question across them.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import warnings
from typing import Any

from rewardlab.envs.spec import EnvSpec
from rewardlab.errors import RewardlabError
from rewardlab.rewards.base import RewardResult
from rewardlab.seeds import derive_seed
from rewardlab.tasks import Row, last_boxed

SIZES = {"train": 1000, "test": 200}
"""Rows generated per split when the spec gives no ``size``."""
ANSWER_FORMATS = {
    "tag": "Give your final answer between <answer> and </answer> tags, and nothing else inside them.",
    "boxed": "Put your final answer within \\boxed{}.",
    "text": "Reply with the answer only.",
}
"""``answer=`` choices: the instruction appended to each question (the extraction follows the choice)."""
REWARD = "rewardlab.envs.gym:gym_reward"
"""The rows' ``meta["reward"]``: the dotted path the trainer and the eval resolve."""
PROBE = "rewardlab probe: not an answer"
"""A nonsense answer scored on the first rows of every dataset loaded: a scorer that pays it on average
:data:`PROBE_LIMIT` or more pays a policy that does not solve the task (``game_of_life_halting`` in 0.1.25 scores
any non-empty answer 1.0: it compares ``bool(answer)`` with ``bool(gold)``). Such a dataset is refused unless the
spec says ``allow_degenerate=true``."""
PROBE_ROWS, PROBE_LIMIT = 8, 0.5
MAX_ANSWER_CHARS = 4096
"""An extracted answer longer than this is not scored (``info["status"] = "answer_too_long"``)."""


def _gym() -> Any:
    try:
        with warnings.catch_warnings():  # a dependency (cellpylib) compiles with SyntaxWarnings on first import
            warnings.simplefilter("ignore", SyntaxWarning)
            import reasoning_gym
    except ImportError:
        raise RewardlabError("reasoning_gym: the package is not installed (pip install reasoning-gym)") from None
    return reasoning_gym


@functools.lru_cache(maxsize=None)
def _scorer(dataset: str) -> Any:
    """reasoning-gym's ``score_answer`` of ``dataset``, made once per process: ``get_score_answer_fn`` builds a
    default dataset on every call (40 ms for ``spell_backward``, which reads its word list)."""
    return _gym().get_score_answer_fn(dataset)


def extract(completion: str, answer: str) -> str | None:
    """The answer the completion marks under format ``answer``, or None; linear time.

    ``tag``: the text between the last ``</answer>`` and the ``<answer>`` before it (reasoning-gym's
    ``extract_answer`` takes the last match too), stripped.
    """
    if answer == "text":
        return completion.strip()
    if answer == "boxed":
        return last_boxed(completion)
    end = completion.rfind("</answer>")
    start = completion.rfind("<answer>", 0, end) if end >= 0 else -1
    if start < 0:
        return None
    return completion[start + len("<answer>"):end].strip()


def gym_reward(completion: str, reference: Any = None, **meta: Any) -> RewardResult:
    """reasoning-gym's ``score_answer`` on the answer the completion marks; ``reference`` is a row's
    ``{"entry": <reasoning-gym entry>, "answer_format": "tag" | "boxed" | "text"}``. Statuses besides ``ok``:
    ``no_answer``, ``answer_too_long``, ``env_error`` (the scorer raised), ``not_gradable`` (not such a row)."""
    entry = reference.get("entry") if isinstance(reference, dict) else None
    if not isinstance(entry, dict) or not isinstance(entry.get("metadata"), dict):
        return RewardResult(None, {"status": "not_gradable", "reason": "reference is not a reasoning-gym row"})
    fmt = str(reference.get("answer_format", "tag"))
    source = str(entry["metadata"].get("source_dataset", ""))
    answer = extract(str(completion), fmt)
    if answer is None:
        return RewardResult(0.0, {"status": "no_answer", "answer_format": fmt, "dataset": source})
    if len(answer) > MAX_ANSWER_CHARS:
        return RewardResult(0.0, {"status": "answer_too_long", "chars": len(answer), "dataset": source})
    try:
        score = float(_scorer(source)(answer, entry))
    except RewardlabError:
        raise
    except Exception as e:  # noqa: BLE001 - the environment's scorer failed: counted, never a silent 0
        return RewardResult(0.0, {"status": "env_error", "error": f"{type(e).__name__}: {e}"[:300],
                                  "extracted": answer[:200], "dataset": source})
    return RewardResult(score, {"status": "ok", "extracted": answer[:200], "dataset": source})


gym_reward.name = "reasoning_gym"  # type: ignore[attr-defined]  # metric key rewards/reasoning_gym/...


def _dataset(spec: EnvSpec, split: str, seed: int, limit: int | None) -> tuple[Any, dict[str, Any]]:
    opts = dict(spec.options)
    opts.pop("answer", None)
    opts.pop("allow_degenerate", None)
    size = int(opts.pop("size", SIZES.get(split, SIZES["test"])))
    base_seed = int(opts.pop("seed", seed))
    ds_seed = derive_seed("reasoning_gym", spec.name, split, base_seed)
    if limit is not None:
        size = min(size, limit)  # item i depends on (seed, i) only: the first rows are the same
    rg = _gym()
    from reasoning_gym.factory import DATASETS

    if spec.name not in DATASETS:
        raise RewardlabError(f"reasoning_gym: unknown dataset {spec.name!r}; `rewardlab envs list` shows the "
                             f"{len(DATASETS)} there are")
    try:
        ds = rg.create_dataset(spec.name, size=max(size, 1), seed=ds_seed, **opts)
    except (TypeError, ValueError, AssertionError, KeyError) as e:
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise RewardlabError(f"reasoning_gym:{spec.name}: bad options {opts}: {why}") from None
    return ds, {"seed": ds_seed, "size": size, "config": _jsonable(dataclasses.asdict(ds.config))}


def _jsonable(x: Any) -> Any:
    return json.loads(json.dumps(x, default=str))


def rows(spec: EnvSpec, split: str, *, limit: int | None = None, seed: int = 0) -> tuple[list[Row], dict[str, Any]]:
    """The rows of a reasoning-gym spec for ``split`` and where they came from."""
    fmt = str(spec.options.get("answer", "tag"))
    if fmt not in ANSWER_FORMATS:
        raise RewardlabError(f"reasoning_gym:{spec.name}: answer={fmt!r}; choose from {', '.join(ANSWER_FORMATS)}")
    ds, made = _dataset(spec, split, seed, limit)
    out = []
    for i in range(made["size"]):
        entry = ds[i]
        prompt = [{"role": "user", "content": f"{entry['question']}\n\n{ANSWER_FORMATS[fmt]}"}]
        out.append(Row(id=f"reasoning_gym/{spec.name}/{split}/{i}", prompt=prompt,
                       reference={"entry": entry, "answer_format": fmt}, meta={"reward": REWARD, "env": spec.text}))
    _probe(spec, out)
    blob = json.dumps([[r.id, r.prompt, r.reference] for r in out], sort_keys=True, default=str)
    source = {"source": "env", "env": spec.text, "kind": "reasoning_gym", "dataset": spec.name,
              "package": f"reasoning-gym {_version()}", "split": split, **made, "records": len(out),
              "sha256": hashlib.sha256(blob.encode()).hexdigest()}
    return out, source


def _probe(spec: EnvSpec, rows: list[Row]) -> None:
    """Refuse a dataset whose scorer pays :data:`PROBE` (unless ``allow_degenerate=true``)."""
    if spec.options.get("allow_degenerate") is True or not rows:
        return
    probe = {"tag": f"<answer>{PROBE}</answer>", "boxed": f"\\boxed{{{PROBE}}}", "text": PROBE}
    scores = [float(gym_reward(probe[r.reference["answer_format"]], r.reference).score or 0.0)
              for r in rows[:PROBE_ROWS]]
    mean = sum(scores) / len(scores)
    if mean >= PROBE_LIMIT:
        raise RewardlabError(f"reasoning_gym:{spec.name}: its score_answer pays a nonsense answer ({PROBE!r} scores "
                             f"{mean:.2f} on {len(scores)} rows), so a policy collects it without solving; pass "
                             "?allow_degenerate=true to use it anyway")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("reasoning-gym")
    except PackageNotFoundError:
        return "unknown"


def catalogue() -> dict[str, dict[str, Any]]:
    """Every reasoning-gym dataset -> its config's fields and defaults (``rewardlab envs list``)."""
    _gym()
    from reasoning_gym.factory import DATASETS

    out = {}
    for name, (_, config_cls) in sorted(DATASETS.items()):
        fields = {}
        for f in dataclasses.fields(config_cls):
            if f.name in ("seed", "size"):
                continue
            default = f.default if f.default is not dataclasses.MISSING else (
                f.default_factory() if f.default_factory is not dataclasses.MISSING else None)  # type: ignore[misc]
            fields[f.name] = _jsonable(default)
        out[name] = fields
    return out


__all__ = ["gym_reward"]
