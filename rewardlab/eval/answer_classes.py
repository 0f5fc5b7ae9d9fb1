"""Answer classes for maj@k: which of a problem's extracted answers rewardlab's math reward calls one vote.

:func:`math_answer_classes` labels each sample of each problem with its equivalence class;
:func:`class_correctness` gives each class its verdict (see :mod:`rewardlab.eval.passk` for maj@k).
"""

from __future__ import annotations

from typing import Any


def math_answer_classes(answers: Any, *, deadline: float = 10.0) -> list[list[int | None]]:
    """Equivalence classes of each problem's extracted answers, by rewardlab's math reward.

    ``answers[p][i]`` is sample i's answer of problem p (None: no answer). Two answers are one vote
    when they are the same string (after stripping), or when the math reward says the later one
    equals the earlier one (its fast path, :func:`rewardlab.rewards.math.equiv.fast_compare`; the
    pairs it leaves undecided go, all problems in one batch, to ``math_reward`` (``\\boxed{later}``
    against the earlier as gold) under the pool's ``deadline``). Classes are the transitive closure
    of those links (union-find). Returns per problem the class label of each sample (labels 0, 1, ...
    in order of first appearance; None for no answer).
    """
    from rewardlab.rewards import math_reward, score_batch
    from rewardlab.rewards.math.equiv import fast_compare

    per_problem = []
    pending: list[tuple[int, int, int]] = []  # (problem, later distinct index, earlier distinct index)
    texts: list[str] = []
    golds: list[str] = []
    for p, answers_p in enumerate(answers):
        distinct: list[str] = []
        where: list[int | None] = []
        for a in answers_p:
            if a is None or not str(a).strip():
                where.append(None)
                continue
            a = str(a).strip()
            if a not in distinct:
                distinct.append(a)
            where.append(distinct.index(a))
        parent = list(range(len(distinct)))
        links: list[tuple[int, int]] = []
        for j in range(len(distinct)):
            for i in range(j):
                try:
                    eq = fast_compare(distinct[j], distinct[i]).equal
                except Exception:  # noqa: BLE001 - an answer the fast path cannot read is its own vote
                    eq = False
                if eq is True:
                    links.append((j, i))
                elif eq is None:
                    pending.append((p, j, i))
                    texts.append(f"\\boxed{{{distinct[j]}}}")
                    golds.append(distinct[i])
        per_problem.append((distinct, where, parent, links))
    if pending:
        res = score_batch(math_reward, texts, golds, deadline=deadline)
        for (p, j, i), r in zip(pending, res):
            if r.score is not None and r.score >= 1.0 - 1e-9:
                per_problem[p][3].append((j, i))
    out: list[list[int | None]] = []
    for distinct, where, parent, links in per_problem:
        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for j, i in links:
            rj, ri = find(j), find(i)
            if rj != ri:
                parent[max(rj, ri)] = min(rj, ri)
        relabel: dict[int, int] = {}
        labels: list[int | None] = []
        for w in where:
            if w is None:
                labels.append(None)
                continue
            root = find(w)
            labels.append(relabel.setdefault(root, len(relabel)))
        out.append(labels)
    return out


def class_correctness(labels: list[int | None], correct: list[bool]) -> tuple[dict[int, bool], int]:
    """Each class's correctness (that of its first sample, its representative) and how many classes
    hold samples the grader scored differently (0 when the reward's equivalence and its verdicts agree)."""
    first: dict[int, bool] = {}
    seen: dict[int, set] = {}
    for lab, ok in zip(labels, correct):
        if lab is None:
            continue
        first.setdefault(lab, bool(ok))
        seen.setdefault(lab, set()).add(bool(ok))
    return first, sum(len(v) > 1 for v in seen.values())


__all__ = ["class_correctness", "math_answer_classes"]
