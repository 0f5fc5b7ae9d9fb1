"""Coverage-guided fuzzing with a cost oracle: no caller-thread entry point is slow, hungry or raises.

``bench/fuzz_coverage.py`` runs atheris (libFuzzer) in a subprocess over every entry point that runs on
a trainer's thread without a deadline (``caller_thread_paths()``, ``extract_answer``, ``extract_gold``,
``fast_compare``), seeded with the regression tables of ``tests/test_fuzz_rewards.py`` and
``tests/test_math_reward.py`` and the public corpus. A call over the CPU bound (twice in a row) or
the memory bound, or one that raises, is a finding: the harness raises, libFuzzer saves the input.

The bound (``TIME_BOUND_MS`` = 50 ms of thread CPU per call) has a wide margin over what was measured:
uninstrumented, the seed corpus has p99 < 1 ms and a maximum of ~21 ms (a 4,000-character run of
``\\(``) per entry point; instrumented by atheris, p99 ~1 ms and a maximum of ~25 ms over 30 s of fuzzing.
The long run is ``.venv/bin/python bench/fuzz_coverage.py --seconds 600``.
"""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path

import pytest

pytest.importorskip("atheris")

BENCH = Path(__file__).resolve().parent.parent / "bench" / "fuzz_coverage.py"
SECONDS = 25


def _harness():
    spec = importlib.util.spec_from_file_location("fuzz_coverage", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


fc = _harness()


def _describe(res: dict) -> str:
    lines = [f"rc {res['rc']}, {res['last_status']}"] + res["finding_lines"]
    for f in res["findings"]:
        lines.append(f"[{f['kind']}] completion={f['completion'][:400]!r} gold={(f['gold'] or '')[:100]!r}")
    return "\n".join(lines + ["--- log tail ---", res["log_tail"][-2000:]])


def test_atheris_finds_no_slow_hungry_or_raising_input() -> None:
    res = fc.run_coverage(SECONDS, seed=0, quiet=True)
    assert res["rc"] == 0 and not res["findings"] and not res["finding_lines"], _describe(res)
    runs = int(res["stats"].get("number_of_executed_units", 0))
    assert runs > 1000, f"the fuzzer hardly ran: {_describe(res)}"
    assert set(res["costs"]) == set(fc.entry_points()), "every entry point was exercised"


def test_the_cost_oracle_raises_on_a_slow_call_a_raise_and_a_memory_hog() -> None:
    def burn(t, g):
        if "SLOW" in t:
            end = time.thread_time() + 0.2
            while time.thread_time() < end:
                pass

    def boom(t, g):
        if "BOOM" in t:
            raise ValueError("boom")

    def rss_mb() -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    def hog(t, g):
        if "HOG" in t:
            # 200 MB above the process's peak so far, wherever that is: the oracle reads the peak RSS, and an
            # earlier test on the same xdist worker may have left it far above the current RSS (a fixed 200 MB
            # then raised nothing: regression of this session's CI run)
            block = bytearray(int(max(0.0, fc._peak_rss_mb() - rss_mb()) + 200) << 20)
            block[::4096] = b"x" * len(block[::4096])  # touch every page: RSS, not just address space
            return len(block)

    check = fc.make_checker({"burn": burn, "boom": boom, "hog": hog}, time_bound_s=0.05, mem_bound_mb=50)
    check("fine", "5")
    with pytest.raises(fc.CostFinding, match="burn took"):
        check("SLOW", "5")
    with pytest.raises(fc.CostFinding, match="boom raised ValueError"):
        check("BOOM", "5")
    # faulting in 200 MB costs a few hundred ms of CPU on a loaded machine: a time bound that cannot fire
    check_mem = fc.make_checker({"hog": hog}, time_bound_s=30.0, mem_bound_mb=50)
    with pytest.raises(fc.CostFinding, match="hog raised the peak RSS"):
        check_mem("HOG", "5")


def test_atheris_reports_the_input_of_a_finding() -> None:
    """End to end, the harness is not vacuous: with a bound no call can meet, libFuzzer saves a crash
    input and the parent decodes it into (completion, gold)."""
    res = fc.run_coverage(3, seed=0, quiet=True, time_bound_ms=1e-6, targets="extract_answer")
    assert res["rc"] != 0 and res["findings"], _describe(res)
    assert res["findings"][0]["kind"] == "crash"
    assert any("CostFinding" in line for line in res["finding_lines"])


def test_seed_corpus_holds_the_regression_tables_and_the_public_corpus() -> None:
    seeds = fc.seed_inputs()
    texts = {c for c, _ in seeds}
    assert any(c.startswith("The answer is 5 abab") for c in texts)  # tests/test_fuzz_rewards.py REGRESSIONS
    assert any("#### 72" in c for c in texts)  # tests/test_math_reward.py CASES
    assert len(seeds) > 100
    assert fc.decode(fc.encode("a \\boxed{5}", "5")) == ("a \\boxed{5}", "5")
