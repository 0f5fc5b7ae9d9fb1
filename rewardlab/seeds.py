"""The one seed derivation: ``derive_seed(*parts)`` splits a random stream into independent ones.

A utility: it imports nothing of rewardlab, so that rollout, train and eval share it. Every place
that turns a user's seed into the seed of one sub-stream (a step's sampling, one vLLM request, one
trajectory's generator, an epoch's prompt order, a problem's maj@k draws) calls it, with a label
naming the stream first and the coordinates of the sub-stream after it:

    derive_seed("rollout", seed, step, gen_round, rank)     # -> an int in [0, 2**31 - 1)
"""

from __future__ import annotations

import hashlib
import operator

SEED_RANGE = 2**31 - 1
"""Derived seeds lie in ``[0, SEED_RANGE)``: below every consumer's bound. ``numpy.random.RandomState``
takes ``[0, 2**32)``, ``torch.manual_seed`` / ``torch.Generator.manual_seed`` ``[0, 2**64)``,
``random.Random`` any int, and a vLLM request seed is kept as a signed 32-bit int by some samplers;
``[0, 2**31 - 1)`` fits all of them (and is the range the per-request seeds used before)."""


def _encode(part: int | str) -> bytes:
    """One part, tagged with its type and length, so that ``1`` and ``"1"``, or ``("a", "b")`` and
    ``("ab",)``, never encode alike."""
    if isinstance(part, str):
        tag, body = b"s", part.encode("utf-8")
    elif isinstance(part, bool) or not hasattr(part, "__index__"):
        raise TypeError(f"seed parts are ints or strs, got {type(part).__name__}: {part!r}")
    else:  # int, numpy integers: their decimal digits
        tag, body = b"i", str(operator.index(part)).encode("ascii")
    return tag + len(body).to_bytes(8, "big") + body


def derive_seed(*parts: int | str) -> int:
    """A seed in ``[0, SEED_RANGE)`` that is a pure function of ``parts`` (ints and strings).

    Guarantees: the same parts give the same seed in every process, on every machine and under every
    Python version (the parts' canonical bytes are hashed with BLAKE2b, digest size 8, never with
    ``hash()``, which is salted per process for strings); distinct part tuples give distinct streams
    (a 64-bit digest reduced to 31 bits: two given tuples collide with probability about 2**-31;
    ``1`` and ``"1"`` differ, and so do reorderings); the range fits numpy's ``RandomState``,
    ``torch.manual_seed``, ``random.Random`` and vLLM's per-request seeds (:data:`SEED_RANGE`).
    Parts may be any size and sign. At least one part; ``bool`` is refused (a flag is not a
    coordinate of a stream).
    """
    if not parts:
        raise ValueError("derive_seed needs at least one part")
    digest = hashlib.blake2b(b"".join(_encode(p) for p in parts), digest_size=8).digest()
    return int.from_bytes(digest, "big") % SEED_RANGE
