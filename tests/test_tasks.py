"""Task loaders: built-in arith, the local-data path of each dataset task, and one-line errors."""

from __future__ import annotations

import gzip
import json

import pytest
from conftest import data_dir

from rewardlab import tasks
from rewardlab.errors import RewardlabError
from rewardlab.tasks import Row, gsm8k_gold, last_boxed, load_task


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    """Tests read local files only: never probe the Hub."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


needs_data = pytest.mark.skipif(data_dir() is None, reason="no evaluation data folder (set REWARDLAB_DATA_DIR)")


# ----------------------------------------------------------------------------- arith


def test_arith_deterministic_and_seeded():
    a = load_task("arith", "train", limit=50, seed=3)
    b = load_task("arith", "train", limit=50, seed=3)
    c = load_task("arith", "train", limit=50, seed=4)
    assert a == b
    assert [r.prompt for r in a] != [r.prompt for r in c]
    assert len(a) == 50 and len({r.id for r in a}) == 50


def test_arith_default_sizes_and_split_streams():
    train, test = load_task("arith", "train"), load_task("arith", "test")
    assert len(train) == tasks.ARITH_TRAIN_SIZE and len(test) == tasks.ARITH_TEST_SIZE
    assert train[:20] != test[:20]
    assert load_task("arith", "train", limit=10) == train[:10]  # limit is a prefix


@pytest.mark.parametrize("level", [1, 2, 3])
def test_arith_rows_are_correct(level):
    for row in load_task(f"arith:{level}", "train", limit=200):
        a, b, op = row.meta["a"], row.meta["b"], row.meta["op"]
        assert row.reference == str(a + b if op == "+" else a - b)
        assert int(row.reference) >= 0
        assert row.meta["reward"] == "math" and row.meta["level"] == level
        assert row.prompt[0]["role"] == "user" and row.prompt[0]["content"].endswith(tasks.ARITH_INSTRUCTION)
        assert str(a) in row.prompt[0]["content"] and str(b) in row.prompt[0]["content"]
        if level == 1:
            assert op == "+" and 1 <= a <= 9 and 1 <= b <= 9


def test_arith_prompts_are_short():
    # Prompt length is CPU time on every rollout: keep the default task's prompts to one short line.
    assert max(len(r.prompt[0]["content"]) for r in load_task("arith", limit=300)) < 140


@pytest.mark.parametrize("name, match", [("arith:9", "level"), ("arith:x", "arith:LEVEL")])
def test_arith_bad_level(name, match):
    with pytest.raises(RewardlabError, match=match):
        load_task(name)


# ----------------------------------------------------------------------------- answers


@pytest.mark.parametrize(
    "text, expected",
    [
        ("so \\boxed{5}", "5"),                                   # simple
        ("\\boxed{1} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # last one, nested braces
        ("\\fbox{7}", "7"),                                       # \fbox counts too
        ("\\boxed{3} and \\fbox{4}", "4"),                        # whichever comes last
        ("no box", None),
        ("\\boxed{unclosed", None),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


@pytest.mark.parametrize(
    "answer, expected",
    [
        ("48/2 = 24\n#### 72", "72"),
        ("...\n#### 1,000", "1000"),    # thousands separator stripped
        ("#### -3", "-3"),              # negative
        ("no gold", None),
    ],
)
def test_gsm8k_gold(answer, expected):
    assert gsm8k_gold(answer) == expected


# ----------------------------------------------------------------------------- dataset tasks (local files)


@needs_data
def test_gsm8k_local():
    rows = load_task("gsm8k", "test", data_dir=data_dir())
    assert len(rows) == 1319
    r = rows[0]
    assert isinstance(r, Row) and r.id == "gsm8k/test/0" and r.reference == "18"
    assert r.meta["reward"] == "math" and r.meta["solution"].endswith("#### 18")
    assert r.prompt[0]["content"].startswith("Janet") and "\\boxed{}" in r.prompt[0]["content"]
    assert all("," not in x.reference for x in load_task("gsm8k", "train", data_dir=data_dir()))


@needs_data
def test_gsm8k_env_var(monkeypatch):
    monkeypatch.setenv("REWARDLAB_DATA_DIR", str(data_dir()))
    assert len(load_task("gsm8k", "test", limit=5)) == 5
    assert tasks.data_dir() == data_dir()


@needs_data
def test_math_pools():
    test = load_task("math", "test", data_dir=data_dir())
    train = load_task("math", "train", data_dir=data_dir())
    m500 = load_task("math500", "test", data_dir=data_dir())
    assert len(test) == 5000 and len(train) == 4500 and len(m500) == 500
    problems500 = {r.meta["problem"].strip() for r in m500}
    assert not problems500 & {r.meta["problem"].strip() for r in train}  # no overlap with MATH-500
    assert all(r.reference for r in test)
    assert m500[0].id == "test/precalculus/807.json" and m500[0].reference == "\\left( 3, \\frac{\\pi}{2} \\right)"
    # The boxed gold of MATH-500's source solution equals its answer field.
    by_problem = {r.meta["problem"].strip(): r.reference for r in test}
    assert all(by_problem[r.meta["problem"].strip()] == r.reference for r in m500[:100])


@needs_data
def test_humaneval_local():
    rows = load_task("humaneval", "test", data_dir=data_dir())
    assert len(rows) == 164
    r = rows[0]
    assert r.id == "HumanEval/0" and r.meta["reward"] == "code"
    assert set(r.reference) == {"tests", "entry_point", "prompt"}
    assert r.reference["entry_point"] == "has_close_elements"
    assert "def check(candidate)" in r.reference["tests"]
    assert r.reference["prompt"] in r.prompt[0]["content"]


@pytest.mark.parametrize(
    "name, split",
    [("math500", "train"), ("humaneval", "train"), ("gsm8k", "validation"), ("arith", "dev")],
)
def test_bad_split(name, split, tmp_path):
    with pytest.raises(RewardlabError, match="no split"):
        load_task(name, split, data_dir=tmp_path)


def test_unknown_task():
    with pytest.raises(RewardlabError, match="unknown task 'mmlu'"):
        load_task("mmlu")


def test_missing_file_names_the_file_and_setting(tmp_path):
    with pytest.raises(RewardlabError) as e:
        load_task("gsm8k", "test", data_dir=tmp_path)
    msg = str(e.value)
    assert "gsm8k/test.jsonl" in msg and "REWARDLAB_DATA_DIR" in msg and "\n" not in msg


def test_no_data_dir_offline(monkeypatch):
    monkeypatch.delenv("REWARDLAB_DATA_DIR", raising=False)
    with pytest.raises(RewardlabError, match="REWARDLAB_DATA_DIR"):
        load_task("math500", "test")


def test_data_dir_must_exist(tmp_path):
    with pytest.raises(RewardlabError, match="does not exist"):
        load_task("gsm8k", data_dir=tmp_path / "nope")


def test_rows_missing_fields(tmp_path):
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "train.jsonl").write_text(json.dumps({"question": "q"}) + "\n")
    with pytest.raises(RewardlabError, match=r"train.jsonl row 0: missing field\(s\) answer"):
        load_task("gsm8k", "train", data_dir=tmp_path)
    (tmp_path / "gsm8k" / "train.jsonl").write_text(json.dumps({"question": "q", "answer": "no gold"}) + "\n")
    with pytest.raises(RewardlabError, match="####"):
        load_task("gsm8k", "train", data_dir=tmp_path)


def test_bad_json_line(tmp_path):
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "test.jsonl").write_text('{"question": "q", "answer": "#### 1"}\n{oops\n')
    with pytest.raises(RewardlabError, match="line 2: not valid JSON"):
        load_task("gsm8k", "test", data_dir=tmp_path)


def test_math_solution_without_box(tmp_path):
    (tmp_path / "math").mkdir()
    (tmp_path / "math" / "math_test_5000.jsonl").write_text(json.dumps({"problem": "p", "solution": "s"}) + "\n")
    with pytest.raises(RewardlabError, match="boxed"):
        load_task("math", "test", data_dir=tmp_path)


def test_humaneval_missing_fields_gz(tmp_path):
    (tmp_path / "humaneval").mkdir()
    with gzip.open(tmp_path / "humaneval" / "HumanEval.jsonl.gz", "wt") as f:
        f.write(json.dumps({"task_id": "X/0", "prompt": "def f():\n"}) + "\n")
    with pytest.raises(RewardlabError, match="missing field\\(s\\) test, entry_point"):
        load_task("humaneval", "test", data_dir=tmp_path)


def test_custom_jsonl(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text(
        json.dumps({"prompt": "1+1?", "answer": "2"}) + "\n"
        + json.dumps({"id": "b", "prompt": [{"role": "user", "content": "2+2?"}], "reference": "4", "reward": "math",
                      "level": 1}) + "\n"
    )
    rows = load_task(str(path))
    assert rows[0] == Row("mine/0", [{"role": "user", "content": "1+1?"}], "2",
                          {"reward": "math", "task": "mine", "source": str(path)})
    assert rows[1].id == "b" and rows[1].reference == "4" and rows[1].meta["level"] == 1
    path.write_text(json.dumps({"prompt": "x"}) + "\n")
    with pytest.raises(RewardlabError, match="missing field answer"):
        load_task(str(path))
    with pytest.raises(RewardlabError, match="does not exist"):
        load_task(str(tmp_path / "other.jsonl"))


def test_hub_path_maps_fields(monkeypatch):
    """When the Hub answers, its records go through the same field mapping as local files."""
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("REWARDLAB_DATA_DIR", raising=False)  # a local data folder would win (local first)
    monkeypatch.setattr("rewardlab.models.hub_reachable", lambda timeout=3.0: True)
    calls = []

    def fake_load(path, name, split):
        calls.append((path, name, split))
        return [{"question": "Q?", "answer": "work\n#### 1,234"}]

    monkeypatch.setattr(tasks, "load_hub_dataset", fake_load)
    rows = load_task("gsm8k", "train")
    assert calls == [("openai/gsm8k", "main", "train")]
    assert rows[0].reference == "1234" and rows[0].meta["source"] == "hub"


def test_hub_failure_falls_back_to_local(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr("rewardlab.models.hub_reachable", lambda timeout=3.0: True)

    def broken(*a, **k):
        raise ConnectionError("reset")

    monkeypatch.setattr(tasks, "load_hub_dataset", broken)
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "test.jsonl").write_text(json.dumps({"question": "q", "answer": "#### 3"}) + "\n")
    monkeypatch.setenv("REWARDLAB_DATA_DIR", str(tmp_path))
    rows = load_task("gsm8k", "test")
    assert rows[0].reference == "3" and rows[0].meta["source"].endswith("test.jsonl")


def test_local_folder_wins_over_the_hub(monkeypatch, tmp_path):
    """The one data rule: a file in the data folder is used even when the Hub answers; a file the
    folder lacks comes from the Hub."""
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr("rewardlab.models.hub_reachable", lambda timeout=3.0: True)
    calls = []

    def fake_load(path, name, split):
        calls.append((path, name, split))
        return [{"question": "hub q", "answer": "#### 9"}]

    monkeypatch.setattr(tasks, "load_hub_dataset", fake_load)
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "test.jsonl").write_text(json.dumps({"question": "local q", "answer": "#### 3"}) + "\n")
    monkeypatch.setenv("REWARDLAB_DATA_DIR", str(tmp_path))
    rows, source = tasks.load_task_with_source("gsm8k", "test")
    assert rows[0].reference == "3" and calls == [] and source["source"] == "local" and len(source["sha256"]) == 64
    rows, source = tasks.load_task_with_source("gsm8k", "train")  # no train file in the folder
    assert rows[0].reference == "9" and calls == [("openai/gsm8k", "main", "train")] and source["source"] == "hub"


def test_prompts_are_declared_once():
    row = load_task("arith", "test", limit=1)[0]
    assert row.prompt[0]["content"] == tasks.PROMPTS["arith"].format(question=row.meta["question"])
    assert tasks.PROMPTS["gsm8k"].format(question="Q?") == "Q?\n" + tasks.BOXED_INSTRUCTION
