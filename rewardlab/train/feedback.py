"""A critic that talks back (``--feedback``): the dual-agent rollout's trainer side.

    rewardlab train --task arith --feedback ref                     # a frozen copy of the start writes feedback
    rewardlab train --task arith --feedback policy --feedback-train-every 4

After the actor's answer, a critic model writes feedback on it, the feedback comes back as a user
turn (loss-masked, the chat template's own separators: ``rollout.multiturn.feedback_ids``) and the
actor answers again; the reward grades the second answer. The first answer is graded too
(``feedback/first_reward``), so every step logs the improvement the feedback caused.

The critic is ``ref`` (a frozen copy of the policy as it was loaded), ``policy`` (the live policy,
prompted with ``--feedback-prompt``) or any model (hub id or folder, frozen). With ``--feedback policy
--feedback-train-every k`` every k-th step trains the critic instead of the actor: the samples are the
critic's prompts and feedback tokens, their reward is the improvement (second reward - first), and
the G feedbacks on one question form a group, so the advantage says which feedback helped most.

This is the "dual-agent" idea from popular write-ups of DAPO, not the published DAPO
(Yu et al. 2025), which has no critic and one answer per prompt.
"""

from __future__ import annotations

from typing import Any

from rewardlab import models
from rewardlab.errors import RewardlabError
from rewardlab.rollout import LIVE_ENGINE, SamplingParams, format_prompt, make_engine
from rewardlab.rollout.base import Completion
from rewardlab.rollout.multiturn import FeedbackEngine
from rewardlab.seeds import derive_seed
from rewardlab.train.samples import Sample
from rewardlab.train.state import Run
from rewardlab.train.state import run_sampling


def feedback_engine(run: Run, start: Any) -> FeedbackEngine:
    """The dual-agent engine over the live policy; ``start`` is a frozen copy of the starting policy (``ref``)."""
    cfg = run.cfg
    if cfg.feedback == "policy":
        critic_model = run.model
    elif cfg.feedback == "ref":
        critic_model = start.to(run.device)
    else:
        critic_model, _ = models.load_model(cfg.feedback, dtype="float32", device=str(run.device))
        critic_model.eval().requires_grad_(False)
    engine = make_engine(LIVE_ENGINE, critic_model, run.tok, batch_size=cfg.rollout_batch_size)

    def critic(questions: list[str], answers: list[str], sampling: SamplingParams) -> list[Completion]:
        prompts = [format_prompt(run.tok, cfg.feedback_prompt.format(question=q, answer=a.strip()))
                   for q, a in zip(questions, answers)]
        seed = None if sampling.seed is None else derive_seed("feedback", sampling.seed)  # the critic's own stream
        params = run_sampling(cfg, seed=seed, max_new_tokens=cfg.feedback_tokens)
        if cfg.feedback == "policy":  # the critic is the live policy: sample from its current weights
            engine.load_weights(run.model)
        return engine.generate(prompts, 1, params)

    return FeedbackEngine(run.model, run.tok, critic=critic,
                          max_total_tokens=4 * cfg.max_new_tokens + 2 * cfg.feedback_tokens,
                          batch_size=cfg.rollout_batch_size)


def question_of(row: Any) -> str:
    """What the critic is told the question was: the row's last user message."""
    if isinstance(row.prompt, str):
        return row.prompt
    users = [m["content"] for m in row.prompt if m.get("role") == "user"]
    return str(users[-1] if users else row.prompt[-1]["content"])


def grade_first_attempts(run: Run, samples: list[Sample]) -> None:
    """``s.first_score``: the task reward of each sample's first answer (before the feedback)."""
    texts = []
    for s in samples:
        a, b = s.turns[0]["sampled"]
        texts.append(run.tok.decode(s.token_ids[a:b], skip_special_tokens=True))
    results = run.grade([s.row for s in samples], texts)
    for s, res in zip(samples, results):
        comps = dict(res.info.get("components") or {run.main_reward: res.score})
        s.first_score = float(comps.get(run.main_reward, res.score) or 0.0)


def critic_step(run: Run, step: int) -> bool:
    """Whether this step trains the critic (``--feedback policy --feedback-train-every k``, every k-th step)."""
    k = run.cfg.feedback_train_every
    return run.cfg.feedback == "policy" and k > 0 and step % k == 0


def critic_samples(kept: list[Sample]) -> list[Sample]:
    """The critic's view of the actor's samples: its prompt and feedback tokens, rewarded by the improvement."""
    out = []
    for s in kept:
        c = s.turns[0].get("critic")
        if c is None:  # the first answer used the whole budget: no feedback was asked for
            continue
        gain = float(s.task_score or 0.0) - float(s.first_score or 0.0)
        out.append(Sample(group=s.group, row=s.row, prompt_text="", prompt_ids=list(c.prompt_ids),
                          token_ids=list(c.token_ids), text=c.text, finish_reason=c.finish_reason, score=gain,
                          task_score=gain, components={"improvement": gain}, info={}, gen_round=s.gen_round,
                          rollout_logprobs=None if c.logprobs is None else list(c.logprobs)))
    if not out:
        raise RewardlabError("--feedback-train-every: no feedback was written this step (every first answer "
                             "used the whole token budget); raise --max-new-tokens")
    return out


def feedback_metrics(samples: list[Sample], trained_critic: bool) -> dict[str, Any]:
    """``feedback/*``: the first and the final answers' task reward, and the improvement ({} without --feedback)."""
    rows = [s for s in samples if s.first_score is not None]
    if not rows:
        return {}
    first = sum(s.first_score for s in rows) / len(rows)
    final = sum(float(s.task_score or 0.0) for s in rows) / len(rows)
    return {"feedback/first_reward": first, "feedback/final_reward": final, "feedback/improvement": final - first,
            "feedback/critic_step": int(trained_critic)}


__all__ = ["critic_samples", "critic_step", "feedback_engine", "feedback_metrics", "grade_first_attempts",
           "question_of"]
