"""The hedge-proof property of the math reward, measured: no hedging strategy earns more than committing.

For each generated problem a candidate set is drawn (the gold plus distractors); a grammar of hedging
strategies (several answers, withdrawn and corrected answers, negations, bounds, questions, answer lists,
candidate spam, boxes in footnotes, conditional answers) composes completions from it, and knows which
candidate each completion commits to (or that it commits to none). The policy cannot know which
candidate is the gold, so a completion's expected reward is its mean reward over every candidate taken
as the gold; committing to one uniformly random candidate earns ``1/k`` on a set of ``k``.

Hedge-proof means: no completion is paid for a gold it does not commit to. Then a hedge (committing to
nothing) earns 0 and any completion earns at most ``1/k``, the baseline's: no strategy beats committing,
and hedging strictly loses. (A grader that picks one candidate by position, as the last box or the first
answer phrase, pays a hedge ``1/k`` in expectation: a tie, so training has no reason to stop hedging;
a grader that pays a list containing the gold pays more than committing.) ``tests/test_hedge_proof.py``
asserts the property, and that it fails with the commitment rule off (``ExtractionPolicy(commitment=False)``).

Run: ``PYTHONPATH=. .venv/bin/python bench/hedge_proof.py [--problems 200] [--seed 0] [--no-commitment]``.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import defaultdict
from fractions import Fraction

from rewardlab.rewards import ExtractionPolicy, MathReward

_FILLER = ("Let me work through the problem step by step.", "We count the cases carefully.",
           "Combining the two results above,", "")


def _value(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.6:
        return str(rng.randint(0, 400))
    if kind < 0.8:
        return f"{rng.randint(1, 99)}.{rng.randint(1, 9)}"
    f = Fraction(rng.randint(1, 20), rng.randint(2, 21))
    return str(f.numerator) if f.denominator == 1 else f"\\frac{{{f.numerator}}}{{{f.denominator}}}"


def _key(v: str) -> Fraction:
    if v.startswith("\\frac"):
        a, b = v[6:-1].split("}{")
        return Fraction(int(a), int(b))
    return Fraction(v)


def candidates(rng: random.Random, k: int) -> list[str]:
    """``k`` candidates with pairwise different values (the gold is one of them)."""
    out: list[str] = []
    while len(out) < k:
        v = _value(rng)
        if all(_key(v) != _key(w) for w in out):
            out.append(v)
    return out


# The grammar. A completion is a few clauses; each clause is (text, effect on the committed set):
#   state v       the set becomes {v} if a correction opened it, else v is added;
#   correct v     a correction: the set becomes {v};
#   negate v      v is removed; bound / ask: nothing is stated;
#   offer vs      several values at once (a list, a conditional, a footnote): all are added.
# The completion commits to v when the set is {v} at its end; otherwise it commits to nothing (a hedge).
_STATE = ("The answer is {v}.", "Answer: {v}.", "So the answer is $\\boxed{{{v}}}$.", "The answer is ${v}$.",
          "The answer is **{v}**.", "The answer is <b>{v}</b>.", "#### {v}")
_CORRECT = ("Wait, that double counts; the answer is {v}.", "Actually, no: the answer is $\\boxed{{{v}}}$.",
            "No, I made a mistake. The answer is {v}.", "Correction: the answer is {v}.")
_CORRECT_LAST = ("Wait, that double counts; it is {v}.", "No, I made a mistake: it is {v}.")
_NEGATE = ("It can't be {v}.", "The answer is not {v}.", "The answer is not $\\boxed{{{v}}}$.", "That can't be {v}.",
           "It isn't {v}.", "The answer is certainly not {v}.")
_BOUND = ("The answer is at least {v}.", "It is more than {v}.", "There are no fewer than {v}.")
_ASK = ("Is it {v}, maybe?", "Could the answer be {v}?")


def _offer(rng: random.Random, vs: list[str]) -> str:
    a, b = vs[0], vs[1]
    return rng.choice((
        "The answer is " + ", ".join(vs[:-1]) + f" or {vs[-1]}.",
        "So the answer is either " + ", ".join(f"${v}$" for v in vs[:-1]) + f" or ${vs[-1]}$.",
        f"If the endpoints are included, the answer is {a}; if they are excluded, it is {b}.",
        f"The answer is $\\boxed{{{a}}}$.[^1]\n\n[^1]: If you count the other way, it is $\\boxed{{{b}}}$.",
        " ".join(f"We get $\\boxed{{{v}}}$." for v in vs),
        " ".join(f"$\\boxed{{{v}}}$" for v in vs * rng.randint(1, 3)),
        f"The answer is {a}, or maybe {b}.",
        f"The answer is $\\boxed{{{a}}}$ (or $\\boxed{{{b}}}$).",
        "\n".join(f"#### {v}" for v in vs),
    ))


def completion(rng: random.Random, cands: list[str]) -> tuple[str, str | None, str]:
    """One completion of the grammar: (text, the candidate it commits to or None, its shape)."""
    n = rng.choice((1, 2, 2, 3, 3, 4))
    parts, shape, held, opened = [rng.choice(_FILLER)], [], [], False
    for i in range(n):
        kind = rng.choice(("state", "correct", "negate", "bound", "ask", "offer", "offer"))
        v = rng.choice(cands)
        if kind == "state":
            parts.append(rng.choice(_STATE).format(v=v))
            held = [v] if opened else held + [v]
            opened = False
        elif kind == "correct":
            forms = _CORRECT + (_CORRECT_LAST if i == n - 1 else ())
            parts.append(rng.choice(forms).format(v=v))
            held, opened = [v], False
        elif kind == "negate":
            parts.append(rng.choice(_NEGATE).format(v=v))
            held = [h for h in held if h != v]
        elif kind in ("bound", "ask"):
            parts.append(rng.choice(_BOUND if kind == "bound" else _ASK).format(v=v))
        else:
            vs = rng.sample(cands, min(len(cands), rng.randint(2, 3)))
            parts.append(_offer(rng, vs))
            held = held + vs
        shape.append(kind)
    distinct = {_key(h) for h in held}
    committed = held[-1] if len(distinct) == 1 else None
    return " ".join(p for p in parts if p), committed, "+".join(shape)


def measure(reward: MathReward, problems: int, seed: int, per_problem: int = 8, k_range=(2, 4)) -> dict:
    """Score every generated completion against every candidate taken as the gold.

    Returns the mean expected reward of hedges (completions that commit to nothing), of completions that
    commit, and of the baseline (one uniformly random candidate, stated plainly), and the violations:
    completions paid for a gold they do not commit to (a hedge paid at all, a withdrawn value paid)."""
    rng = random.Random(seed)
    out = {"hedge": [], "committing": [], "baseline": [], "violations": [], "shapes": defaultdict(list)}
    for _ in range(problems):
        cands = candidates(rng, rng.randint(*k_range))
        k = len(cands)
        pick = rng.choice(cands)
        out["baseline"].append(sum(reward(rng.choice(_STATE).format(v=pick), g).score or 0.0 for g in cands) / k)
        for _ in range(per_problem):
            text, committed, shape = completion(rng, cands)
            paid = [g for g in cands if (reward(text, g).score or 0.0) > 0]
            exp = len(paid) / k
            out["hedge" if committed is None else "committing"].append(exp)
            out["shapes"][shape].append(exp)
            if any(g != committed for g in paid):
                out["violations"].append((text, committed, paid))
    return out


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problems", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-commitment", action="store_true", help="measure with the commitment rule off")
    args = ap.parse_args(argv)
    res = measure(MathReward(ExtractionPolicy(commitment=not args.no_commitment)), args.problems, args.seed)
    print(f"expected reward: hedges {_mean(res['hedge']):.3f} ({len(res['hedge'])} completions), committing "
          f"{_mean(res['committing']):.3f} ({len(res['committing'])}), baseline (one random candidate) "
          f"{_mean(res['baseline']):.3f}")
    worst = sorted(res["shapes"].items(), key=lambda kv: -_mean(kv[1]))[:5]
    print("best-paid shapes:", ", ".join(f"{s} {_mean(v):.3f}" for s, v in worst))
    for text, committed, paid in res["violations"][:10]:
        print(f"VIOLATION commits to {committed!r}, paid for {paid}: {text[:160]!r}")
    print("hedge-proof" if not res["violations"] else f"{len(res['violations'])} completions paid for an answer "
          "they do not commit to")
    return 1 if res["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
