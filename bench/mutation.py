"""Mutation testing for the modules whose numbers the README quotes: algos, passk, math_values.

    OMP_NUM_THREADS=1 .venv/bin/python bench/mutation.py algos passk math_values
    .venv/bin/python bench/mutation.py passk --keep           # keep the scratch copy (mutmut show/browse there)
    .venv/bin/python bench/mutation.py algos --fail-under 90  # exit 1 below 90% killed
    .venv/bin/python bench/mutation.py --fail-on-new          # exit 1 on a survivor EQUIVALENT does not explain

For each module it copies the project (``pyproject.toml``, ``rewardlab/``, ``tests/``, ``evals/``,
``sandbox/``) into a scratch folder outside the work tree, links ``../shared`` beside it, narrows
``[tool.mutmut]`` to that one source file and its own test files, runs ``mutmut run`` there and
prints killed / survived / timeout / no tests / total, the % killed, and every survivor with the
line it changes. mutmut 3 mutates a copy (``mutants/``) of that scratch copy, so nothing in the
work tree is ever written; the script checks that the module's source in the work tree is
byte-identical before and after the run. ``math_values`` is restricted to the value comparison
(``scalars_equal``, ``_vals_equal``, ``_terminates_within``) unless ``--whole-file`` is given: the
rest of that file is the LaTeX evaluator, which tests/test_math_reward.py covers through the reward.

Each survivor is checked against ``EQUIVALENT`` (mutants reviewed and found equivalent, with the
reason) and printed as ``[equivalent: why]`` or ``[NEW]``: a new survivor is a test to write or an
equivalence to argue. The scratch run skips tests/conftest.py (``--noconftest``: its session-wide
reward pool would start again in every forked mutant). The scratch folder is deleted afterwards
unless ``--keep``. The script lowers its own priority to nice 10 (for shared machines) and sets
OMP_NUM_THREADS=1 for the test processes.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COPY = ("pyproject.toml", "rewardlab", "tests", "evals", "sandbox")
MUTMUT = "import sys; from mutmut.__main__ import cli; sys.argv[0] = 'mutmut'; cli()"
# All diffs in one process (mutmut 3's own diff function); `mutmut show NAME` per mutant is the fallback.
DIFFS = (
    "import json, sys; from mutmut.mutation.diff_apply import get_diff_for_mutant; "
    "names = json.load(sys.stdin); print('@@DIFFS@@' + json.dumps({n: get_diff_for_mutant(n) for n in names}))"
)


@dataclass(frozen=True)
class Target:
    sources: tuple[str, ...]  # where the module lives, newest layout first: the first file that exists
    tests: tuple[str, ...]
    functions: tuple[str, ...] = ()  # empty: every function in the file

    @property
    def source(self) -> str:
        for path in self.sources:
            if (REPO / path).is_file():
                return path
        raise SystemExit(f"none of {', '.join(self.sources)} exists")


TARGETS: dict[str, Target] = {
    "algos": Target(
        ("rewardlab/algos/loss.py", "rewardlab/algos/__init__.py"),
        ("tests/test_algos.py", "tests/test_algos_reference.py", "tests/test_algos_properties.py"),
    ),
    "algos_grouping": Target(
        ("rewardlab/algos/grouping.py",),
        ("tests/test_algos.py", "tests/test_algos_reference.py", "tests/test_algos_properties.py"),
    ),
    "passk": Target(("rewardlab/eval/passk.py", "rewardlab/passk.py"), ("tests/test_passk.py",)),
    "math_values": Target(
        ("rewardlab/rewards/math/values.py", "rewardlab/rewards/math_values.py"),
        ("tests/test_math_values*.py",),
        ("scalars_equal", "_vals_equal", "_terminates_within"),
    ),
}


# Survivors reviewed and found equivalent (no test can tell them from the original), matched by
# (module, function, a fragment of the mutated line). Anything not matched is printed as NEW: kill it
# with a test, or add it here with the reason. Generic rule in _equivalent(): a mutant that only drops
# a dtype=/device= argument or turns one (or a .to(...) target) into None changes nothing on CPU tensors
# whose values type promotion carries over exactly.
EQUIVALENT: list[tuple[str, str, str, str]] = [
    ("algos", "*", "sum(+1)", "dim +1 is dim -1 on the (B, T) tensors these functions accept"),
    ("algos", "*", "any(+1)", "dim +1 is dim -1 on (B, T) masks"),
    ("algos_grouping", "*", "bincount(inv, )", "every group id occurs, so bincount's length already is n_groups"),
    ("algos_grouping", "*", "group_index(group_ids, len(r), None)", "device None: inv.to(None) stays on the CPU"),
    ("algos_grouping", "*", "group_index(group_ids, len(s), None)", "device None: inv.to(None) stays on the CPU"),
    ("algos", "_group_index", "+ 2 if", "an extra, empty group is never indexed"),
    ("algos", "_group_index", "else 1", "only for empty input, which then returns an empty result either way"),
    ("algos", "combine_metrics", "METRIC_REDUCE.get(k,", "the 'plain' reduction is the else branch"),
    ("algos", "combine_metrics", "total_tokens = sum(p.get(",
     "total_tokens is used only when no part has tokens: 0 either way"),
    ("algos", "combine_metrics", 'not in keys', "with tokens present, out['tokens'] already is their sum"),
    ("algos", "kl_penalty", 'rstrip("XX+XX")', "rstrip takes a set of characters; no KL name contains X"),
    ("algos", "kl_penalty", "clamp(None, _K3_X_CLAMP)",
     "for x < -20 the k3 value exceeds 19, so the value clamp at 10 decides"),
    ("algos", "kl_penalty", "clamp(None, _K3_VALUE_CLAMP)", "exp(x) - x - 1 >= 0: the lower value clamp never acts"),
    ("algos", "policy_loss", "(adv <= 0)", "at A = 0 the cap -A*c is 0, equal to the token loss"),
    ("algos", "policy_loss", "adv <= 0, torch.minimum", "at A = 0 the cap -A*c is 0, equal to the token loss"),
    ("algos", "policy_loss", "or True else loss.detach()",
     "without KL/entropy terms the aggregate of tok_loss is the loss"),
    ("passk", "*", 'float("NAN")', 'float("NAN") is nan'),
    ("passk", "pass_at_k", "n + c < k", "without the early return the product has the factor 1 - k/k = 0"),
    ("passk", "sign_test_p", "range(min(", "range(0, x) is range(x)"),
    ("passk", "sign_test_p", "m == 1", "m = 0 and m = 1 both give p = 1 from the formula"),
    ("passk", "newcombe_paired_interval", "cross >= 0", "the correction of 0 is max(-n/2, 0) = 0"),
    ("passk", "newcombe_paired_interval", "max(-2.0, lo)", "lo >= l1 - u2 >= -1 since |phi| <= 1"),
    ("passk", "newcombe_paired_interval", "min(2.0, hi)", "hi <= u1 - l2 <= 1 since |phi| <= 1"),
    ("passk", "wilson_interval", "min(2.0, centre + half)",
     "the Wilson upper limit is < 1 for x < n (checked to n = 3000)"),
    ("math_values", "_vals_equal", "max(1.0, abs(nb))",
     "|na| and |nb| differ by ~1e-9 relative where it matters: below float resolution"),
    ("math_values", "_vals_equal", "max(1.0, abs(na), )",
     "|na| and |nb| differ by ~1e-9 relative where it matters: below float resolution"),
    ("math_values", "_vals_equal", "max(1.0, abs(lb))",
     "the two logs differ by ~1e-6 relative where it matters: below float resolution"),
    ("math_values", "_vals_equal", "max(1.0, abs(la), )",
     "the two logs differ by ~1e-6 relative where it matters: below float resolution"),
    ("math_values", "_vals_equal", "else +math.inf",
     "zero vs a finite magnitude: one infinite log; vs +-inf: both infinite; either sign"),
    ("math_values", "_vals_equal", "scale != 2", "scale is 1 or 1/100; multiplying by 1 changes nothing"),
    ("math_values", "_vals_equal", "< Fraction(1, 10 ** d)",
     "a d-digit decimal is never exactly 10^-d from a non-terminating fraction"),
]
_ARG = re.compile(r"(,\s*)?\b(dtype|device)=[\w.]+|\.to\(None\)|\.to\([\w.]+\)")


def _equivalent(module: str, name: str, diff: str) -> str | None:
    """The reason a survivor is a known equivalent mutant, or None."""
    minus = [ln[1:] for ln in diff.splitlines() if ln.startswith("-")]
    plus = [ln[1:] for ln in diff.splitlines() if ln.startswith("+")]
    norm = lambda ln: re.sub(r",\s*\)", ")", _ARG.sub("", ln)).replace(" ", "")  # noqa: E731
    if plus and len(minus) == len(plus) and all(norm(a) == norm(b) for a, b in zip(minus, plus)):
        return "only a dtype/device argument or .to(...) target changed: no-op on CPU by type promotion"
    fn = _mangled(name)
    for mod, func, fragment, reason in EQUIVALENT:
        if mod == module and func in ("*", fn) and any(fragment in ln for ln in plus):
            return reason
    return None


@dataclass
class Score:
    module: str
    statuses: dict[str, str] = field(default_factory=dict)  # mutant name -> mutmut status
    diffs: dict[str, str] = field(default_factory=dict)  # survivor -> changed lines
    equivalent: dict[str, str] = field(default_factory=dict)  # survivor -> why it is equivalent
    seconds: float = 0.0

    def count(self, status: str) -> int:
        return sum(1 for s in self.statuses.values() if s == status)

    @property
    def total(self) -> int:
        return len(self.statuses)

    @property
    def percent_killed(self) -> float:
        return 100.0 * self.count("killed") / self.total if self.total else 0.0

    def not_killed(self) -> list[str]:
        return sorted(k for k, s in self.statuses.items() if s != "killed")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (str, list)):
        return json.dumps(v)  # a JSON string / array of strings is valid TOML
    raise TypeError(f"unsupported [tool.mutmut] value {v!r}")


def _scratch_pyproject(text: str, settings: dict) -> str:
    """``text`` with its ``[tool.mutmut]`` table replaced by ``settings``."""
    out, skipping = [], False
    for line in text.splitlines():
        if re.match(r"^\[[^\[\]]+\]\s*(#.*)?$", line):  # a table header
            skipping = line.strip() == "[tool.mutmut]"
        if not skipping:
            out.append(line)
    out.append("")
    out.append("[tool.mutmut]")
    out.extend(f"{k} = {_toml_value(v)}" for k, v in settings.items())
    return "\n".join(out) + "\n"


def _mangled(name: str) -> str:
    """The function part of a mutmut 3 mutant name: ``pkg.mod.x_func__mutmut_3`` -> ``func``."""
    tail = name.rsplit(".", 1)[-1].split("__mutmut_")[0]
    return tail.split("ǁ")[-1] if "ǁ" in tail else tail.removeprefix("x_")


def _mutmut(args: list[str], cwd: Path, env: dict, log=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", MUTMUT, *args], cwd=cwd, env=env, text=True,
        stdout=log if log is not None else subprocess.PIPE, stderr=subprocess.STDOUT,
    )


def _diffs(names: list[str], cwd: Path, env: dict) -> dict[str, str]:
    if not names:
        return {}
    proc = subprocess.run([sys.executable, "-c", DIFFS], cwd=cwd, env=env, text=True, input=json.dumps(names),
                          capture_output=True)
    for line in proc.stdout.splitlines():
        if proc.returncode == 0 and line.startswith("@@DIFFS@@"):
            return json.loads(line.removeprefix("@@DIFFS@@"))
    return {n: _mutmut(["show", n], cwd, env).stdout for n in names}


def _changed_lines(diff: str) -> str:
    lines = [ln for ln in diff.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    return "\n".join(lines)


def run_module(module: str, target: Target, scratch_root: Path, args) -> Score:
    tests = sorted({os.path.relpath(p, REPO) for pat in target.tests for p in glob.glob(str(REPO / pat))})
    if not tests:
        raise SystemExit(f"{module}: no test files match {target.tests}")
    project = scratch_root / module
    project.mkdir(parents=True)
    for name in COPY:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, project / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis"))
        elif src.is_file():
            shutil.copy2(src, project / name)
    shared = REPO.parent / "shared"
    if shared.is_dir():  # tests find ../shared from mutants/tests/..: it must sit beside mutants/
        (project / "shared").symlink_to(shared)

    pyproject = REPO / "pyproject.toml"
    settings = dict(tomllib.loads(pyproject.read_text()).get("tool", {}).get("mutmut", {}))
    settings.update(
        source_paths=["rewardlab"],
        only_mutate=[target.source],
        pytest_add_cli_args_test_selection=tests,
        use_git_change_detection=False,
    )
    # The target modules are pure and their test files use no conftest fixture. tests/conftest.py
    # starts session-wide services (the reward worker pool) that would start again in every forked
    # mutant run and turn slow starts into false timeouts or kills, so the scratch run skips it.
    settings["pytest_add_cli_args"] = [*settings.get("pytest_add_cli_args", []), "--noconftest"]
    settings.setdefault("also_copy", ["evals", "sandbox"])
    (project / "pyproject.toml").write_text(_scratch_pyproject(pyproject.read_text(), settings))

    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    data = Path(env.get("REWARDLAB_DATA_DIR") or (REPO.parent / "shared" / "data"))
    if not data.is_absolute():
        data = (REPO / data).resolve()
    if data.is_dir():
        env["REWARDLAB_DATA_DIR"] = str(data)
    env.pop("PYTEST_ADDOPTS", None)

    dotted = target.source.removesuffix(".py").replace("/", ".")
    names = [f"{dotted}.*{fn}__mutmut_*" for fn in target.functions] if target.functions and not args.whole_file else []
    before = _sha(REPO / target.source)
    print(f"== {module}: mutating {target.source}" + (f" ({', '.join(target.functions)})" if names else "")
          + f"; tests: {' '.join(tests)}", flush=True)
    t0 = time.monotonic()
    log_path = project / "mutmut.log"
    with log_path.open("w") as log:
        proc = _mutmut(["run", "--max-children", str(args.max_children), *names], project, env, log)
    score = Score(module, seconds=time.monotonic() - t0)
    if proc.returncode != 0:
        print(log_path.read_text()[-4000:])
        raise SystemExit(f"{module}: mutmut run exited {proc.returncode} (log above; scratch copy: {project})")

    res = _mutmut(["results", "--all", "true"], project, env)
    prefix = dotted + "."
    for line in res.stdout.splitlines():
        m = re.match(r"^\s+(\S+): (.+)$", line)
        if not m or not m.group(1).startswith(prefix):
            continue
        name, status = m.group(1), m.group(2).strip()
        if names and _mangled(name) not in target.functions:
            continue
        score.statuses[name] = status
    wanted = [n for n in score.not_killed() if args.diffs or score.statuses[n] in ("survived", "no tests")]
    for name, diff in _diffs(wanted, project, env).items():
        score.diffs[name] = diff if args.diffs else _changed_lines(diff)
        reason = _equivalent(module, name, _changed_lines(diff)) if score.statuses[name] == "survived" else None
        if reason:
            score.equivalent[name] = reason
    after = _sha(REPO / target.source)
    if after != before:
        print(f"WARNING: {target.source} changed in the work tree during the run (not by mutmut, which only "
              f"wrote under {project}); the score is for the version copied at the start.")
    return score


def report(score: Score) -> None:
    k, s, t, nt = (score.count(x) for x in ("killed", "survived", "timeout", "no tests"))
    other = score.total - k - s - t - nt
    print(f"{score.module}: killed {k} / survived {s} / timeout {t} / no tests {nt}"
          + (f" / other {other}" if other else "")
          + f" / total {score.total} -> {score.percent_killed:.1f}% killed ({score.seconds:.0f} s)")
    for name in score.not_killed():
        status = score.statuses[name]
        why = score.equivalent.get(name)
        print(f"  {status:9s} {name}"
              + (f"  [equivalent: {why}]" if why else "  [NEW]" if status == "survived" else ""))
        for ln in score.diffs.get(name, "").splitlines():
            print(f"            {ln}")
    new = [n for n in score.not_killed() if n not in score.equivalent]
    print(f"{score.module}: {len(score.equivalent)} known equivalent, {len(new)} not explained"
          + (" (kill them with a test, or add them to EQUIVALENT with the reason)" if new else ""))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("modules", nargs="*", default=list(TARGETS), help=f"any of {', '.join(TARGETS)} (default: all)")
    ap.add_argument("--max-children", type=int, default=2, help="parallel mutant workers (default 2)")
    ap.add_argument("--whole-file", action="store_true",
                    help="math_values: mutate every function, not only the comparison")
    ap.add_argument("--diffs", action="store_true", help="print full diffs of every mutant not killed")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder (to rerun `mutmut show NAME` there)")
    ap.add_argument("--workdir", type=Path, help="scratch folder to use (default: a new temporary folder)")
    ap.add_argument("--json", type=Path, help="also write the scores and statuses to this file")
    ap.add_argument("--fail-under", type=float, help="exit 1 when a module's %% killed is below this")
    ap.add_argument("--fail-on-new", action="store_true",
                    help="exit 1 when a mutant survives that EQUIVALENT does not explain (or has no test)")
    args = ap.parse_args(argv)
    unknown = [m for m in args.modules if m not in TARGETS]
    if unknown:
        ap.error(f"unknown module(s) {', '.join(unknown)}; choose from {', '.join(TARGETS)}")
    try:
        os.nice(max(0, 10 - os.nice(0)))
    except OSError:
        pass

    scratch = args.workdir or Path(tempfile.mkdtemp(prefix="rewardlab-mutation-"))
    scratch = scratch.resolve()
    if scratch == REPO or REPO in scratch.parents:
        ap.error("--workdir must be outside the work tree")
    scratch.mkdir(parents=True, exist_ok=True)
    scores: list[Score] = []
    try:
        for module in args.modules:
            if (scratch / module).exists():
                shutil.rmtree(scratch / module)
            scores.append(run_module(module, TARGETS[module], scratch, args))
            report(scores[-1])
    finally:
        if args.keep:
            print(f"scratch copies kept in {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)

    print()
    print("module       killed  survived  timeout  no-tests  total  % killed  unexplained")
    for sc in scores:
        print(f"{sc.module:12s} {sc.count('killed'):6d}  {sc.count('survived'):8d}  {sc.count('timeout'):7d}  "
              f"{sc.count('no tests'):8d}  {sc.total:5d}  {sc.percent_killed:7.1f}%  "
              f"{len(sc.not_killed()) - len(sc.equivalent):11d}")
    if args.json:
        args.json.write_text(json.dumps(
            {sc.module: {"killed": sc.count("killed"), "survived": sc.count("survived"), "timeout": sc.count("timeout"),
                         "no_tests": sc.count("no tests"), "total": sc.total, "percent_killed": sc.percent_killed,
                         "equivalent": sc.equivalent, "statuses": sc.statuses} for sc in scores}, indent=2) + "\n")
    status = 0
    if args.fail_under is not None:
        low = [sc.module for sc in scores if sc.percent_killed < args.fail_under]
        if low:
            print(f"below {args.fail_under}% killed: {', '.join(low)}")
            status = 1
    if args.fail_on_new:
        new = [sc.module for sc in scores if len(sc.not_killed()) > len(sc.equivalent)]
        if new:
            print(f"survivors not explained in: {', '.join(new)}")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
