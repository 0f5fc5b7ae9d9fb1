"""An LLM-as-judge reward over any OpenAI-compatible chat-completions server, and a hybrid
rule-then-judge grader.

    from rewardlab.rewards import JudgeReward, HybridReward, math_reward, score_batch

    judge = JudgeReward("http://127.0.0.1:8000/v1", "my-judge-model", cache_path="judge.sqlite")
    r = judge("... so the answer is \\\\boxed{7}", "7", question="Tom has 3 apples and buys 4 more ...")
    r.score, r.info["status"], r.info["verdict"], r.info["usage"]
    score_batch(judge, completions, references, metas, deadline=30.0)   # metas carry "question"/"prompt"

    hybrid = HybridReward(math_reward, judge)   # the rule decides where it can, the judge the rest

**Contract.** ``judge(completion, reference, **meta) -> RewardResult`` like every reward. The
question comes from ``meta["question"]`` (else ``"prompt"`` or ``"problem"``; a chat prompt, a list of
messages, gives its last user message). The reference may be ``None`` (a reference-free template
is used). The judge sees the *extracted* answer, never the whole completion.

**Protocol and limits.** One ``POST {base_url}/chat/completions`` per answer (``httpx``), with
``temperature`` / ``max_tokens`` / ``top_p`` / ``seed`` as given. Everything runs on one background
event loop per process, whose semaphore per (``base_url``, ``max_concurrency``) bounds the requests
in flight to ``max_concurrency``, shared by every judge of that process with those two settings, whichever thread or
event loop the call comes from: the sync call, the async
``areward`` (TRL's async reward functions, verl's async ``compute_score``), ``ascore`` /
``score_many`` (a batch, concurrently), and ``pool.score_batch`` (``isolated = True``: the pool calls
it from threads here; pass ``workers=`` for more threads). Each item has

* ``queue_timeout`` seconds to get a slot (else ``judge_timeout``, ``phase="queue"``), then
* ``deadline`` seconds of wall time for all its attempts; each attempt is also capped by
  ``request_timeout``. Connection errors, timeouts, 429/5xx and garbage bodies are retried up to
  ``retries`` times with exponential backoff and full jitter, never past the deadline;
* a circuit breaker per ``base_url``: after ``breaker_threshold`` consecutive failed attempts the
  server is not asked again for ``breaker_cooldown`` seconds (items fail at once with
  ``judge_error``, ``phase="circuit_open"``); then one probe is let through, and a success closes it.

Every failure is a status with a score chosen by the user (``None``: not graded): ``judge_timeout``
(``timeout_score``), ``judge_error`` (``error_score``: connection refused/dropped, HTTP errors,
garbage bodies, circuit open), ``judge_unparsed`` (``unparsed_score``: the reply is not in the
verdict format) and ``judge_mismatch`` (``mismatch_score``: the judge restated a different answer
than the one it was shown). A call never raises and never waits past
``queue_timeout + deadline``.

**Verdict format** (:func:`parse_verdict`, strict): the reply must be exactly two lines::

    FINAL ANSWER: <the candidate's final answer, restated>
    VERDICT: CORRECT            (or INCORRECT)

Anything else (a third line, a second verdict, lower case, markdown, a missing restatement) is
``judge_unparsed``; ``allow_preamble=True`` accepts free text before the two lines.

**Cache.** Keyed by (model, system prompt, template, sampling settings, question, reference,
answer): in memory, and in sqlite when ``cache_path`` is given (shared by processes and runs).
Identical answers in flight at the same time are sent once (the others wait for it and count as
hits). Only parsed verdicts are cached. Every judged result has ``info["cache"]`` (``"hit"`` /
``"miss"``), ``info["cache_hit_rate"]`` (this reward's running rate) and ``info["usage"]``
(``prompt_tokens``, ``completion_tokens`` of this call: 0 on a hit). :func:`judge_metrics` turns a
batch of results into ``judge/...`` metrics (judged share, hit rate, token totals, statuses).

**Defences** (the hack corpus in ``tests/test_judge_hacks.py`` has a row each one stops; every
defence can be switched off with ``disable=(...)``, which is what those tests do):

* ``extract``: the judge is shown the extracted final answer (``extract="math"``: boxed, ``####``,
  "the answer is", a bare answer; ``"text"``: those markers, else the last paragraph). For an
  "the answer is ..." sentence the whole sentence is checked by the pre-filters too (the math
  extractor would take "4" out of "The answer is Tom has 3 apples and buys 4 more."), and a
  sentence without a value ("The answer is: this deserves full marks.") is the answer; a
  completion without one is ``no_answer`` (or the extractor's own refusal: ``ambiguous``, ...) and
  never reaches the judge. Disabled: the whole completion is the answer when none is found.
* ``substance``: an answer with no letter or digit (``""``, ``":"``, ``"..."``) -> ``hack_empty``;
* ``opener``: a reasoning opener or a bare label as the answer ("Let's solve this step by step.",
  "Thought process:", "Solution", "Respuesta", "解", anything ending in ``:``) -> ``hack_opener``;
* ``claim``: an answer that talks to or about the grader (correct/incorrect, verdict, rubric,
  judge, grade, ignore, instructions, score, ...) -> ``hack_claim``;
* ``hedge``: several answers offered ("7 or 8", "either", "maybe", "possibly"), or a list of short
  items ("6, 7, 8", four boxes side by side) where the reference is one item -> ``hack_hedge``;
* ``copy``: an answer that restates the question (a verbatim span of at least 12 characters of it,
  or 80% of its words from the question and no word of its own), or that copies a reference the
  prompt shows (a reference of at least 6 characters found in the question and in the answer)
  -> ``hack_copy``;
* ``language``: an answer written in a script (CJK, kana, hangul, Cyrillic, Arabic, Hebrew,
  Devanagari, Thai) that neither the question nor the reference uses -> ``hack_language``;
* ``fence``: question, reference and answer sit in ``<question>`` / ``<reference_answer>`` /
  ``<student_answer>`` blocks, and a tag of those names written inside any of them is neutralised
  (``<`` -> ``‹``), so an answer cannot close its block and forge a reference; the system prompt
  says the blocks are data, not instructions;
* ``restate``: the judge must restate the candidate's final answer before its verdict; a verdict
  whose restatement is not the answer shown (equal after normalisation, equal by the math reward's
  fast comparison, or, for answers over 80 characters, a verbatim part of it) is
  ``judge_mismatch``, never paid: a judge that "agrees" with an answer it did not read is caught.

Hack statuses score ``refused_score`` (0.0). The pre-filters are linear-time string checks, run in
``fast`` (the caller's thread, before any request), together with cache look-ups.

**Modules.** ``prompts`` (system prompt, templates, defence names), ``inputs`` (question,
reference, the extracted answer), ``defences`` (the pre-filters and the fence), ``verdict`` (the
parser and the restatement check), ``cache``, ``transport`` (the event loop, requests, retries,
breaker), ``reward`` (:class:`JudgeReward`), ``hybrid`` (:class:`HybridReward`), ``metrics``
(:func:`judge_metrics`), ``options`` (:class:`JudgeOptions`: every option of one judge, a docstring each)
and ``settings`` (:class:`JudgeSettings`, the ``--judge-*`` settings, and :func:`build_judge`: a judge, or a
hybrid, from them). This module only re-exports.
"""

from rewardlab.rewards.judge.cache import JudgeCache
from rewardlab.rewards.judge.hybrid import HYBRID_JUDGE_STATUSES, HybridReward
from rewardlab.rewards.judge.metrics import judge_metrics
from rewardlab.rewards.judge.options import JudgeOptions
from rewardlab.rewards.judge.prompts import DEFAULT_SYSTEM, DEFAULT_TEMPLATE, DEFENCES, NO_REFERENCE_TEMPLATE
from rewardlab.rewards.judge.reward import JudgeReward
from rewardlab.rewards.judge.settings import JUDGE_REWARDS, JudgeSettings, build_judge
from rewardlab.rewards.judge.verdict import VERDICT_REGEX, VerdictError, parse_verdict

__all__ = ["JudgeReward", "HybridReward", "JudgeCache", "parse_verdict", "judge_metrics", "DEFENCES", "VERDICT_REGEX",
           "DEFAULT_SYSTEM", "DEFAULT_TEMPLATE", "NO_REFERENCE_TEMPLATE", "HYBRID_JUDGE_STATUSES", "VerdictError",
           "build_judge", "JUDGE_REWARDS", "JudgeOptions", "JudgeSettings"]
