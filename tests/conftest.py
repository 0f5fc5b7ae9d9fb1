"""Shared fixtures. Data-dependent tests read REWARDLAB_DATA_DIR (CI sets it to ../shared/data)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def data_dir() -> Path | None:
    """The evaluation-data directory, or None when this machine has none."""
    d = os.environ.get("REWARDLAB_DATA_DIR")
    if d and Path(d).is_dir():
        return Path(d).resolve()
    guess = REPO.parent / "shared" / "data"
    return guess if guess.is_dir() else None


def shared_dir() -> Path | None:
    """The ../shared folder beside the checkout (bench material, fixtures), or None."""
    d = REPO.parent / "shared"
    return d if d.is_dir() else None


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny random Qwen2 causal LM + locally built ChatML tokenizer, saved once per session."""
    from rewardlab.testing import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session", autouse=True)
def warm_reward_pool():
    """Start the reward workers once, before any test needs a verdict from the slow path.

    A cold pool answers ``timeout`` (phase ``startup``) to calls that arrive before a worker is
    ready, by design (see rewardlab/rewards/pool.py); tests of verdicts need a warm pool, and the
    cold-start behaviour has tests of its own (tests/test_deadlines.py) in fresh interpreters."""
    from rewardlab.rewards.pool import get_pool

    assert get_pool().warmup(), "the reward worker pool did not start"
    yield


# --- the order xdist deals tests out in ---------------------------------------------------------

SLOW_FIRST: dict[str, float] = {
    "tests/test_distributed_train.py::test_torchrun_two_ranks": 65.0,  # both tests share one 2-rank run
    "tests/test_async.py::test_resume_regenerates_the_rollouts_in_flight_from_the_same_prompts": 49.0,
    "tests/test_train_eval.py::test_eval_every_resumes_without_repeating_the_start": 42.0,
    "tests/test_train_eval.py::test_eval_every_logs_held_out_accuracy_and_plots_it": 40.0,
    "tests/test_verl_client.py::test_the_same_tests_pass_on_verl_0_8": 35.0,
    "tests/test_sandbox.py::test_attack_harness_auto_tier": 27.0,
    "tests/test_fuzz_coverage.py::test_atheris_finds_no_slow_hungry_or_raising_input": 27.0,
    "tests/test_sandbox.py::test_attack_harness_tier_b": 26.0,
    "tests/test_train.py::test_resume_equals_straight_run": 25.0,
    "tests/test_train.py::test_sigkill_mid_run_resumes_from_last_complete_checkpoint": 24.0,
    "tests/test_models.py::test_embedded_default_model": 21.0,
    "tests/test_eval.py::test_cli_kill_and_resume": 20.0,
    "tests/test_train.py::test_ctrl_c_saves_and_exits_cleanly": 18.0,
    "tests/test_sandbox_fusion.py::test_builtin_task_through_verls_client": 50.0,  # 8 languages, one server
    "tests/test_train_random_model.py::test_random_model_trains_five_steps_with_the_math_reward[dapo]": 16.0,
    "tests/test_train_random_model.py::test_random_model_trains_five_steps_with_the_math_reward[dr_grpo]": 15.0,
    "tests/test_train_random_model.py::test_random_model_trains_five_steps_with_the_math_reward[grpo]": 15.0,
    "tests/test_train_random_model.py::test_random_model_trains_five_steps_with_the_math_reward[gspo]": 15.0,
    "tests/test_train.py::test_bad_input_is_one_line_error": 16.0,
    "tests/test_misuse_train.py::test_second_ctrl_c_stops_promptly_even_with_a_hung_reward": 15.0,
    "tests/test_server.py::test_1000_requests_from_50_concurrent_clients": 14.0,
    "tests/test_eval.py::test_cli_tiny_model_every_benchmark": 13.0,
    "tests/test_distributed.py::test_two_rank_gloo_fsdp_matches_single_process": 12.0,
    "tests/test_misuse_eval.py::test_eval_runs_and_releases_the_lock": 12.0,
    "tests/test_eval.py::test_cli_arith_suite_uses_the_training_task_and_sampling": 11.0,
}
"""Known-slow tests (node-id prefix -> about how many seconds they take with ``-n 2``, measured with
``--durations``). The tests one prefix matches stay together, in collection order (they may share a
module fixture). Tests that need a slow module fixture of a file that many quick tests share (e.g.
test_verl_client's composed configs) are left where they are: moving one would set the fixture up twice."""


def slow_first(items: list, workers: int, chunk: int) -> list:
    """``items`` reordered so that each of the ``workers`` xdist workers starts on known-slow tests.

    xdist's ``load`` scheduler first sends each worker ``chunk`` consecutive items (worker 0 the first
    chunk, worker 1 the next, ...) and then tops workers up as they drain. A long test dealt out last
    leaves the other worker idle at the end; several long tests in one chunk load one worker only. So
    the slow groups are dealt out longest first, each to the worker with the least estimated seconds
    so far (LPT), and placed at the start of that worker's first chunk; the other items keep their
    order. With one worker the slow groups simply come first, longest first."""
    groups: dict[str, list] = {}
    rest = []
    for item in items:
        key = next((p for p in SLOW_FIRST if item.nodeid.startswith(p)), None)
        (groups.setdefault(key, []) if key else rest).append(item)
    load, dealt = [0.0] * workers, [[] for _ in range(workers)]
    for key in sorted(groups, key=lambda k: -SLOW_FIRST[k]):
        w = load.index(min(load))
        load[w] += SLOW_FIRST[key]
        dealt[w].extend(groups[key])
    out, rest = [], iter(rest)
    for w in range(workers - 1):  # the last worker's chunk needs no padding: the rest follows it
        out.extend(dealt[w])
        out.extend(x for _, x in zip(range(chunk - len(dealt[w])), rest))
    return out + dealt[-1] + list(rest)


@pytest.hookimpl(trylast=True)  # after deselection (-k, -m) and pytest's own fixture reordering
def pytest_collection_modifyitems(config, items):
    """Deal the known-slow tests out first, one worker's share at the start of each first chunk."""
    workerinput = getattr(config, "workerinput", None)
    workers = int(workerinput["workercount"]) if workerinput else 1
    if workers > 1 and len(items) < 2 * workers:
        return  # xdist deals such a short list out one by one: nothing to balance
    if config.getoption("dist", "no") == "worksteal":  # worksteal starts each worker on an equal share
        chunk = len(items) // workers
    else:  # load (what -n picks): a quarter of a worker's share, see xdist's LoadScheduling.schedule
        chunk = max(min(len(items) // workers // 4, config.getoption("maxschedchunk", None) or len(items)), 2)
    items[:] = slow_first(items, workers, chunk)
