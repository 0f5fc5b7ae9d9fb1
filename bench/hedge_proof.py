"""The hedge-proof property of the math reward, measured: no hedging strategy earns more than committing.

For each generated problem a candidate set is drawn (the gold plus distractors, shuffled); a grammar of
hedging strategies (several answers, withdrawn answers, negations, answer lists, candidate spam, boxes in
footnotes, conditional answers, questions) writes completions from it. The policy cannot know which
candidate is the gold, so a completion's expected reward is its mean reward over every candidate taken
as the gold; committing to one uniformly random candidate earns ``1/k`` on a set of ``k``. A strategy
beats committing when some completion is paid for two different golds (its expected reward exceeds
``1/k``). ``tests/test_hedge_proof.py`` asserts that none does, and that it would with the commitment
rule off (``ExtractionPolicy(commitment=False)``).

Run: ``PYTHONPATH=. .venv/bin/python bench/hedge_proof.py [--problems 200] [--seed 0] [--no-commitment]``.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import defaultdict
from fractions import Fraction

from rewardlab.rewards import ExtractionPolicy, MathReward

_CORRECTIONS = ("Wait, that double counts; it is {b}.", "Actually, no: the answer is {b}.",
                "No, I made a mistake. It is {b}.", "Correction: {b}.", "Hmm, wait. Let me redo it: {b}.")
_FILLER = ("Let me work through the problem step by step.", "We count the cases carefully.",
           "Combining the two results above,")


def _value(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.6:
        return str(rng.randint(0, 400))
    if kind < 0.8:
        return f"{rng.randint(1, 99)}.{rng.randint(1, 9)}"
    a, b = rng.randint(1, 20), rng.randint(2, 21)
    f = Fraction(a, b)
    return str(f.numerator) if f.denominator == 1 else f"\\frac{{{f.numerator}}}{{{f.denominator}}}"


def candidates(rng: random.Random, k: int) -> list[str]:
    """``k`` candidates with pairwise different values (the gold is one of them)."""
    out: list[str] = []
    seen: set[Fraction] = set()
    while len(out) < k:
        v = _value(rng)
        key = Fraction(v.replace("\\frac{", "").replace("}{", "/").rstrip("}")) if "frac" in v else Fraction(v)
        if key not in seen:
            seen.add(key)
            out.append(v)
    return out


def _m(v: str) -> str:
    return f"${v}$"


def _box(v: str) -> str:
    return f"$\\boxed{{{v}}}$"


# Each rule of the grammar takes the rng and the candidates (in a random order) and writes a completion.
def _several_boxes(rng, c):
    return " ".join(f"{rng.choice(_FILLER)} We get {_box(v)}." for v in c)


def _withdrawn(rng, c):
    a, b = c[0], c[1]
    first = rng.choice((f"Answer: {a}.", f"The answer is {_m(a)}.", f"So the answer is {_box(a)}."))
    return f"{rng.choice(_FILLER)} {first} " + rng.choice(_CORRECTIONS).format(b=_m(b) if rng.random() < .5 else b)


def _or_list(rng, c):
    joined = ", ".join(_m(v) for v in c[:-1]) + f" or {_m(c[-1])}"
    return rng.choice((f"The answer is {joined}.", f"So the answer is either {joined}.",
                       f"The final answer is {', '.join(c[:-1])} or {c[-1]}."))


def _conditional(rng, c):
    return (f"{rng.choice(_FILLER)} If the endpoints are included, the answer is {c[0]}; "
            f"if they are excluded, it is {c[1]}.")


def _negations(rng, c):
    parts = [rng.choice(("It can't be {v}.", "The answer is not {v}.", "It is not $\\boxed{{{v}}}$."))
             .format(v=v) for v in c[:-1]]
    return " ".join(parts) + " " + rng.choice(("The answer is at least {v}.", "The answer is not {v}."))\
        .format(v=c[-1])


def _spam(rng, c):
    vals = c * rng.randint(1, 3)
    rng.shuffle(vals)
    return rng.choice((" ".join(_box(v) for v in vals), "\n".join(f"#### {v}" for v in vals),
                       "Answer: " + ", ".join(vals)))


def _footnote(rng, c):
    return (f"{rng.choice(_FILLER)} The answer is {_box(c[0])}.[^1]\n\n"
            f"[^1]: If you count the other way, it is {_box(c[1])}.")


def _question(rng, c):
    return f"{rng.choice(_FILLER)} Is it {c[0]}, maybe? Or {c[1]}?"


def _commit(rng, c):
    return rng.choice((f"The answer is {_box(c[0])}.", f"Answer: {c[0]}", f"{rng.choice(_FILLER)} So we get {c[0]}.",
                       f"#### {c[0]}"))


STRATEGIES = {
    "several_boxes": _several_boxes, "withdrawn": _withdrawn, "or_list": _or_list, "conditional": _conditional,
    "negations": _negations, "candidate_spam": _spam, "footnote_box": _footnote, "question": _question,
}
"""The hedging grammar; ``commit`` (one candidate, uniformly drawn) is the baseline."""


def measure(reward: MathReward, problems: int, seed: int, k_range=(2, 4)) -> dict[str, dict]:
    """Per strategy: the mean expected reward, the baseline's (committing), and the worst completion."""
    rng = random.Random(seed)
    stats: dict[str, dict] = defaultdict(lambda: {"sum": 0.0, "base": 0.0, "n": 0, "worst": (0.0, "")})
    for _ in range(problems):
        cands = candidates(rng, rng.randint(*k_range))
        k = len(cands)
        for name, rule in STRATEGIES.items():
            order = cands[:]
            rng.shuffle(order)
            text = rule(rng, order)
            commit = _commit(rng, [rng.choice(cands)])
            exp = sum(reward(text, g).score or 0.0 for g in cands) / k
            base = sum(reward(commit, g).score or 0.0 for g in cands) / k
            s = stats[name]
            s["sum"] += exp
            s["base"] += base
            s["n"] += 1
            if exp - 1 / k > s["worst"][0]:
                s["worst"] = (exp - 1 / k, text)
    return {name: {"expected": s["sum"] / s["n"], "commit": s["base"] / s["n"], "excess": s["worst"][0],
                   "example": s["worst"][1]} for name, s in stats.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problems", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-commitment", action="store_true", help="measure with the commitment rule off")
    args = ap.parse_args(argv)
    reward = MathReward(ExtractionPolicy(commitment=not args.no_commitment))
    res = measure(reward, args.problems, args.seed)
    beaten = 0
    print(f"{'strategy':16} {'expected':>9} {'commit':>9}  worst excess over 1/k")
    for name, r in res.items():
        beaten += r["excess"] > 1e-9
        print(f"{name:16} {r['expected']:9.3f} {r['commit']:9.3f}  {r['excess']:.3f} {r['example'][:90]!r}")
    print("hedge-proof" if not beaten else f"{beaten} strategies beat committing")
    return 1 if beaten else 0


if __name__ == "__main__":
    sys.exit(main())
