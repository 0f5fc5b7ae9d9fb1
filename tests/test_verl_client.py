"""rewardlab.adapters.verl inside verl itself: verl's config files, loader and reward managers.

The config is composed by Hydra from verl's own ``ppo_trainer.yaml`` with the override lines the
README gives (read from the README, so a wrong key there fails here), the way
``python -m verl.trainer.main_ppo`` composes it (same config dir and name, Hydra's override
grammar). Hydra needs antlr4 4.9, which clashes with
math-verify's 4.13, so it runs in a subprocess on ``.venv/hydra`` (see setup.sh); everything else
runs here on the installed verl: ``get_custom_reward_fn`` loads our function, ``RewardLoopWorker``
(the class verl runs as a Ray actor, here in this process) builds the reward-loop manager named by
the config and scores a ``DataProto``, and the manager class assembles verl's ``rm_scores``.

The second minor version is tested by :func:`test_the_same_tests_pass_on_verl_0_8`: this module
again, in a subprocess with ``.venv/verl-0.8.0`` first on ``PYTHONPATH`` and ``VERL_UNDER_TEST=0.8.0``
(the version :func:`test_version_under_test` then expects).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rewardlab.rewards.base import RewardResult

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
HYDRA = REPO / ".venv" / "hydra"
VERL_08 = REPO / ".venv" / "verl-0.8.0"

verl = pytest.importorskip("verl", reason="verl is installed by setup.sh")
from verl import DataProto  # noqa: E402
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker  # noqa: E402
from verl.trainer.ppo.reward import get_custom_reward_fn, resolve_reward_manager_cls  # noqa: E402

VERL_CONFIG = Path(verl.__file__).parent / "trainer" / "config"
MANAGERS = ["naive", "dapo", "gdpo", "rate_limited"]
"""verl's reward-loop managers that call a custom reward function in this process. (``remote`` runs
it in Ray actors, which needs a Ray cluster; it calls it with the same keywords.)"""


def last_word(completion: str, reference, **meta) -> RewardResult:
    """1.0 when the last word is the reference (a reward that never needs the worker pool, for the
    manager that runs the reward in forked processes); ``meta_keys`` shows what reached it."""
    words = completion.split()
    return RewardResult(float(bool(words) and words[-1] == str(reference)), {"meta_keys": sorted(meta)})


# --- the README's lines -----------------------------------------------------------------------


def readme_verl_lines() -> tuple[list[str], list[str]]:
    """The verl overrides in the README's trainer section: (the command's, the commented alternatives')."""
    text = README.read_text()
    section = text[text.index("## Rewards in your trainer"):]
    section = section[: section.index("\n## ", 1)]
    block = next(b for b in section.split("```") if "verl.trainer.main_ppo" in b)
    lines = block[: block.index("# OpenRLHF")].splitlines()
    start = next(i for i, line in enumerate(lines) if "verl.trainer.main_ppo" in line)
    command, i = [], start
    while True:
        command.append(lines[i])
        if not lines[i].rstrip().endswith("\\"):
            break
        i += 1
    token = re.compile(r"(?<![\w$(])\+?[A-Za-z_]\w*\.[\w.]+=[^\s\\]+")  # dotted.key=value
    comments = [line for line in lines if line.lstrip().startswith("#")]
    return token.findall("\n".join(command)), token.findall("\n".join(comments))


COMMAND, ALTERNATIVES = readme_verl_lines()


def alternative(key: str) -> str:
    """The README's commented override for ``key`` (e.g. the async function name)."""
    hits = [a for a in ALTERNATIVES if a.split("=")[1] == key or a.split("=")[0].endswith(key)]
    assert hits, f"README has no verl override for {key!r}: {ALTERNATIVES}"
    return hits[0]


def with_overrides(*extra: str, base: list[str] = None) -> list[str]:
    """The README command's overrides with ``extra`` replacing those of the same key."""
    out = {o.split("=")[0].lstrip("+"): o for o in (COMMAND if base is None else base)}
    for o in extra:
        out[o.split("=")[0].lstrip("+")] = o
    return list(out.values())


# --- verl's config, composed as main_ppo composes it ---------------------------------------------

COMPOSE = r"""
import json, sys
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
out = []
with initialize_config_dir(config_dir=sys.argv[1], version_base=None):
    for overrides in json.loads(sys.argv[2]):
        try:
            out.append({"yaml": OmegaConf.to_yaml(compose(config_name="ppo_trainer", overrides=overrides))})
        except Exception as e:
            out.append({"error": f"{type(e).__name__}: {e}".splitlines()[0]})
print(json.dumps(out))
"""


def compose_all(override_sets: list[list[str]]) -> list[dict]:
    """verl's ``ppo_trainer`` config for each override list (one Hydra subprocess for all)."""
    if not (HYDRA / "hydra").is_dir():
        pytest.skip(".venv/hydra missing: run setup.sh")
    env = {**os.environ, "PYTHONPATH": str(HYDRA)}
    proc = subprocess.run([sys.executable, "-c", COMPOSE, str(VERL_CONFIG), json.dumps(override_sets)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def as_config(composed: dict, tokenizer_dir: Path):
    """A composed config as main_ppo hands it on (struct mode), with the actor's tokenizer here."""
    from omegaconf import OmegaConf

    assert "yaml" in composed, composed.get("error")
    cfg = OmegaConf.create(composed["yaml"])
    cfg.actor_rollout_ref.model.path = str(tokenizer_dir)
    OmegaConf.set_struct(cfg, True)
    return cfg


CASES = {
    "readme": COMMAND,
    **{f"manager={m}": with_overrides(f"reward.reward_manager.name={m}") for m in MANAGERS},
    "async": with_overrides(alternative("compute_score_async")),
    "forced": with_overrides(alternative("reward_kwargs.reward")),
    "prime": with_overrides(alternative("compute_score_prime"),
                            "+reward.custom_reward_function.reward_kwargs.reward=test_verl_client.last_word"),
    "prime-file-path": with_overrides(alternative("compute_score_prime"),
                                      "reward.custom_reward_function.path=" + str(REPO / "rewardlab/adapters/verl.py"),
                                      "+reward.custom_reward_function.reward_kwargs.reward=test_verl_client.last_word"),
    "batch": with_overrides("reward.reward_manager.name=batch"),
    "prime-by-name": with_overrides("reward.reward_manager.name=prime"),
    "pre-0.9 keys": [o.replace("reward.custom_reward_function.", "custom_reward_function.") for o in COMMAND],
    "kwargs without +": with_overrides(alternative("reward_kwargs.reward").lstrip("+")),
}


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    from rewardlab.testing import build_tokenizer

    tok_dir = tmp_path_factory.mktemp("verl-tokenizer")
    build_tokenizer().save_pretrained(tok_dir)
    composed = dict(zip(CASES, compose_all(list(CASES.values()))))
    return {name: (c if "error" in c else as_config(c, tok_dir)) for name, c in composed.items()}


@pytest.fixture(scope="module")
def tok(configs):
    from verl.utils import hf_tokenizer

    return hf_tokenizer(str(configs["readme"].actor_rollout_ref.model.path))


# --- a verl batch ---------------------------------------------------------------------------------


def make_batch(tok, rows: list[dict]) -> DataProto:
    """A ``DataProto`` as verl's rollout leaves it: left-padded prompts, right-padded responses,
    ``data_source`` / ``reward_model.ground_truth`` / ``extra_info`` per row (numpy object arrays)."""
    import torch

    pad = tok.pad_token_id
    prompts = [tok.encode(r.get("prompt", "Q: what is it? A: "), add_special_tokens=False) for r in rows]
    responses = [tok.encode(r["response"], add_special_tokens=False) for r in rows]
    p_len, r_len = max(map(len, prompts)), max(max(map(len, responses)), 1)
    p_ids = torch.tensor([[pad] * (p_len - len(p)) + p for p in prompts])
    p_mask = torch.tensor([[0] * (p_len - len(p)) + [1] * len(p) for p in prompts])
    r_ids = torch.tensor([r + [pad] * (r_len - len(r)) for r in responses])
    r_mask = torch.tensor([[1] * len(r) + [0] * (r_len - len(r)) for r in responses])
    return DataProto.from_dict(
        tensors={"prompts": p_ids, "responses": r_ids, "input_ids": torch.cat([p_ids, r_ids], 1),
                 "attention_mask": torch.cat([p_mask, r_mask], 1)},
        non_tensors={
            "data_source": np.array([r.get("data_source", "openai/gsm8k") for r in rows], dtype=object),
            "reward_model": np.array([{"ground_truth": r["truth"], "style": "rule"} for r in rows], dtype=object),
            "extra_info": np.array([dict(r.get("extra_info", {"split": "train", "index": i}))
                                    for i, r in enumerate(rows)], dtype=object),
        },
    )


GSM8K = [
    {"response": "48 / 2 = 24 and 48 + 24 = 72\n#### 72", "truth": "72"},
    {"response": "48 + 48 = 96\n#### 96", "truth": "72"},
    {"response": r"so the answer is \boxed{\frac{1}{2}}", "truth": "0.5", "data_source": "lighteval/MATH"},
]


def reward_loop(cfg, data: DataProto):
    """Score ``data`` as verl's reward loop does: a ``RewardLoopWorker`` (verl's actor class, run in
    this process) loads the function and the manager from ``cfg`` and scores every sample; the
    manager class assembles ``rm_scores``. Returns (scores, extra infos, rm_scores, the manager)."""
    worker = RewardLoopWorker(cfg)
    outputs = worker.loop.run_until_complete(worker.compute_score_batch(data))
    scores = [o["reward_score"] for o in outputs]
    rm_scores = resolve_reward_manager_cls(cfg).assemble_rm_scores(data, scores)
    return scores, [o["reward_extra_info"] for o in outputs], rm_scores, worker.reward_manager


# --- tests ----------------------------------------------------------------------------------------


def test_the_readme_lines_load_our_function(configs):
    cfg = configs["readme"]
    assert cfg.reward.custom_reward_function.path == "pkg://rewardlab.adapters.verl"
    fn = get_custom_reward_fn(cfg)  # verl's own loader; None would mean verl's default scorer
    assert fn is not None and fn.args[0].__module__ == "rewardlab.adapters.verl"
    assert fn.args[0].__name__ == "compute_score"


@pytest.mark.parametrize("case", ["readme", *[f"manager={m}" for m in MANAGERS], "async"])
def test_reward_loop_managers_get_our_scores(configs, tok, case):
    cfg = configs[case]
    scores, extras, rm_scores, manager = reward_loop(cfg, make_batch(tok, GSM8K))
    assert type(manager).__name__ == {"readme": "NaiveRewardManager", "async": "NaiveRewardManager",
                                      "manager=naive": "NaiveRewardManager", "manager=dapo": "DAPORewardManager",
                                      "manager=gdpo": "GDPORewardManager",
                                      "manager=rate_limited": "RateLimitedRewardManager"}[case]
    assert scores == [1.0, 0.0, 1.0]
    assert extras == [{"score": 1.0, "acc": 1.0, "graded": 1.0}, {"score": 0.0, "acc": 0.0, "graded": 1.0},
                      {"score": 1.0, "acc": 1.0, "graded": 1.0}]
    # verl's token-level reward: the score on each response's last valid token, zeros elsewhere
    assert rm_scores.sum(dim=1).tolist() == [1.0, 0.0, 1.0]
    if case == "async":
        assert manager.is_async_reward_score


def test_reward_kwargs_force_one_reward(configs, tok):
    cfg = configs["forced"]
    assert dict(cfg.reward.custom_reward_function.reward_kwargs) == {"reward": "math"}
    rows = [{"response": r"\boxed{72}", "truth": "72", "data_source": "my_private_set"},
            {"response": r"\boxed{7}", "truth": "72", "data_source": "codecontests"}]  # would route to code
    scores, extras, _, _ = reward_loop(cfg, make_batch(tok, rows))
    assert scores == [1.0, 0.0] and [e["graded"] for e in extras] == [1.0, 1.0]


def test_user_fields_named_like_our_parameters_are_graded(configs, tok):
    """verl's ``extra_info`` keys named like a reward's or the pool's parameters are renamed
    ``<key>_``, so the sample is graded (it used to fail with "got multiple values": ungraded)."""
    reserved = ["reference", "completion", "reward", "deadline", "wall_cap", "self", "result"]
    rows = [{"response": "#### 72", "truth": "72", "extra_info": {key: "user value", "index": i}}
            for i, key in enumerate(reserved)]
    scores, extras, _, _ = reward_loop(configs["readme"], make_batch(tok, rows))
    assert scores == [1.0] * len(reserved)
    assert [e["graded"] for e in extras] == [1.0] * len(reserved)


def test_reserved_names_reach_the_reward_renamed(configs, tok):
    cfg = configs["readme"]
    fn = get_custom_reward_fn(cfg)
    d = fn(data_source="x", solution_str="so 72", ground_truth="72",
           extra_info={"reference": "r", "reference_": "taken", "deadline": 1},
           reward="test_verl_client.last_word", return_info=True)
    assert d["graded"] == 1.0 and d["score"] == 1.0 and d["status"] == "ok"
    from rewardlab.adapters._common import user_meta

    assert user_meta({"reference": "r", "reference_": "taken", "deadline": 1, "k": 2}) == {
        "reference__": "r", "reference_": "taken", "deadline_": 1, "k": 2}


def test_prime_manager_reads_compute_score_prime(configs, tok, monkeypatch):
    """verl's legacy PrimeRewardManager calls fn(data_source, solution_str, ground_truth, extra_info)
    positionally in forked worker processes and reads a number (else ``result[0]``).

    verl forks a pool of 64 workers per call (a forking pool starts them all at once) and stops them
    one by one; two rows need two, so the pool is capped at two: the same forked processes, the same
    pickling of the function, 8 s less."""
    from concurrent.futures import ProcessPoolExecutor

    import verl.workers.reward_manager.prime as prime_module
    from verl.workers.reward_manager import PrimeRewardManager

    def two_workers(max_workers=None, *args, **kw):
        return ProcessPoolExecutor(min(max_workers or 2, 2), *args, **kw)

    monkeypatch.setattr(prime_module, "ProcessPoolExecutor", two_workers)

    rows = [{"response": "so 72", "truth": "72"}, {"response": "so 71", "truth": "72"}]
    prime = PrimeRewardManager(tokenizer=tok, num_examine=0, compute_score=get_custom_reward_fn(configs["prime"]))
    assert prime.verify(make_batch(tok, rows)) == [1.0, 0.0]
    # the module loaded by file path is not importable by name: Prime's workers never get the
    # function (it cannot be pickled) and verl scores every sample 0.0 -- hence pkg:// in the README
    by_path = PrimeRewardManager(tokenizer=tok, num_examine=0,
                                 compute_score=get_custom_reward_fn(configs["prime-file-path"]))
    assert by_path.verify(make_batch(tok, rows)) == [0.0, 0.0]


def test_what_verl_rejects_or_ignores(configs):
    # no batch or prime manager in the trainer's registry
    for case, name in [("batch", "batch"), ("prime-by-name", "prime")]:
        with pytest.raises(ValueError, match=f"Unknown reward manager: {name}"):
            resolve_reward_manager_cls(configs[case])
    # the top-level keys of older verl compose, but the trainer does not read them: verl's default scorer
    old = configs["pre-0.9 keys"]
    assert old.custom_reward_function.path == "pkg://rewardlab.adapters.verl"
    if verl.__version__.startswith("0.9"):
        assert get_custom_reward_fn(old) is None
    # reward_kwargs is not in verl's schema: without the README's "+" Hydra refuses the line
    assert "error" in configs["kwargs without +"]


@pytest.mark.skipif(bool(os.environ.get("VERL_UNDER_TEST")), reason="already the second version")
def test_the_same_tests_pass_on_verl_0_8():
    if not (VERL_08 / "verl").is_dir():
        pytest.skip(".venv/verl-0.8.0 missing: run setup.sh")
    # one reward worker: the session fixture warms the whole pool, and no test here depends on its size
    env = {**os.environ, "VERL_UNDER_TEST": "0.8.0", "PYTHONPATH": str(VERL_08), "REWARDLAB_REWARD_WORKERS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", __file__, "-k", "not verl_0_8"],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "skipped" not in proc.stdout.splitlines()[-1], proc.stdout[-2000:]


def test_version_under_test():
    want = os.environ.get("VERL_UNDER_TEST")
    assert verl.__version__ == (want or "0.9.1"), verl.__file__
