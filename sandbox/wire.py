"""Framing and the tagged plain-data codec used on every sandbox pipe. Stdlib only.

Frames are ``4-byte little-endian length + UTF-8 JSON``. Reads and writes take an absolute
``time.monotonic()`` deadline and a size cap, so a misbehaving peer can neither block nor
flood the reader.

Values crossing between the trusted checker and the untrusted worker are *plain data* only:
``None, bool, int, float, str, bytes, complex, list, tuple, dict, set, frozenset``, checked
with exact ``type(x) is ...`` tests (subclasses, e.g. an ``int`` subclass with a forged
``__eq__``, are refused). ``decode`` builds fresh builtin objects, so nothing the worker
defines ever reaches the checker. Tags are one-key JSON objects:
``{"t": [...]}`` tuple, ``{"s": [...]}`` set, ``{"f": [...]}`` frozenset,
``{"d": [[k, v], ...]}`` dict, ``{"b": "<hex>"}`` bytes, ``{"c": [re, im]}`` complex,
``{"i": "<hex>"}`` an int beyond 64 bits.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time

MAX_DEPTH = 200


class WireError(Exception):
    """Malformed, oversized or late frame; the peer is not trustworthy any more."""


class Oversize(WireError):
    """The frame announced more bytes than the reader accepts."""


class Late(WireError):
    """The deadline passed before the frame was complete."""


class Closed(WireError):
    """The peer closed the pipe."""


class NotPlain(TypeError):
    """A value is not plain data."""


TICK = None
"""Optional callable run whenever a read or write waits, at least every 100 ms (the checker's
resource guard; it rate-limits itself and raises to stop the run)."""


def _wait(fd: int, deadline: float | None, write: bool = False) -> None:
    while True:
        rem = None if deadline is None else deadline - time.monotonic()
        if rem is not None and rem <= 0:
            raise Late("deadline passed")
        tick = TICK
        if tick is not None:
            tick()  # rate-limits itself
            rem = 0.1 if rem is None else min(rem, 0.1)
        try:
            r, w, _ = select.select([] if write else [fd], [fd] if write else [], [], rem)
        except InterruptedError:
            continue
        if r or w:
            return


def read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    chunks, got = [], 0
    while got < n:
        _wait(fd, deadline)
        b = os.read(fd, min(n - got, 1 << 20))
        if not b:
            raise Closed("peer closed the pipe")
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


def write_all(fd: int, data: bytes, deadline: float | None) -> None:
    view = memoryview(data)
    while view:
        _wait(fd, deadline, write=True)
        try:
            n = os.write(fd, view[: 1 << 16])
        except BlockingIOError:
            continue
        view = view[n:]


def open_feed(fd: int, data: bytes) -> tuple[int, memoryview]:
    """Start feeding ``data`` to a program's stdin pipe ``fd``: non-blocking, closed at once when empty.
    Returns the fd (-1 once closed) and what is left to write; go on with :func:`feed`."""
    os.set_blocking(fd, False)
    if not data:
        os.close(fd)
        return -1, memoryview(b"")
    return fd, memoryview(data)


def feed(fd: int, data: memoryview) -> tuple[int, memoryview]:
    """Write the next chunk of ``data`` to ``fd`` (a select said it is writable); close it once everything is
    written or the reader has gone. Returns the fd (-1 once closed) and what is left."""
    try:
        data = data[os.write(fd, data[:65536]):]
    except (BrokenPipeError, BlockingIOError):
        data = data[:0]
    if not data:
        os.close(fd)
        return -1, data
    return fd, data


def send(fd: int, obj, deadline: float | None = None) -> None:
    data = json.dumps(obj, separators=(",", ":")).encode()
    write_all(fd, struct.pack("<I", len(data)) + data, deadline)


def recv_raw(fd: int, deadline: float | None = None, cap: int = 64 << 20) -> bytes:
    n = struct.unpack("<I", read_exact(fd, 4, deadline))[0]
    if n > cap:
        raise Oversize(f"frame of {n} bytes exceeds the cap of {cap}")
    return read_exact(fd, n, deadline)


def recv(fd: int, deadline: float | None = None, cap: int = 64 << 20):
    data = recv_raw(fd, deadline, cap)
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as e:
        raise WireError(f"malformed frame: {e}") from None


# ------------------------------------------------------------------------------ plain data
_I64 = 1 << 63


def encode(v, depth: int = 0):
    """Turn plain data into a JSON-able tagged structure; raise NotPlain otherwise."""
    if depth > MAX_DEPTH:
        raise NotPlain("value nested too deeply")
    t = type(v)
    if v is None or t is bool or t is str:
        return v
    if t is int:
        return v if -_I64 <= v < _I64 else {"i": format(v, "x")}
    if t is float:
        return v
    d = depth + 1
    if t is list:
        return [encode(x, d) for x in v]
    if t is tuple:
        return {"t": [encode(x, d) for x in v]}
    if t is dict:
        return {"d": [[encode(k, d), encode(x, d)] for k, x in v.items()]}
    if t is set:
        return {"s": [encode(x, d) for x in v]}
    if t is frozenset:
        return {"f": [encode(x, d) for x in v]}
    if t is bytes:
        return {"b": v.hex()}
    if t is complex:
        return {"c": [v.real, v.imag]}
    raise NotPlain(f"value of type {t.__module__}.{t.__qualname__} is not plain data")


def _hook(o: dict):
    if len(o) != 1:
        raise WireError("bad tag")
    (tag, val), = o.items()
    if tag == "t" and type(val) is list:
        return tuple(val)
    if tag == "d" and type(val) is list:
        out = {}
        for kv in val:
            if type(kv) is not list or len(kv) != 2:
                raise WireError("bad dict item")
            out[kv[0]] = kv[1]
        return out
    if tag == "s" and type(val) is list:
        return set(val)
    if tag == "f" and type(val) is list:
        return frozenset(val)
    if tag == "b" and type(val) is str:
        return bytes.fromhex(val)
    if tag == "c" and type(val) is list and len(val) == 2 and all(type(x) in (int, float) for x in val):
        return complex(val[0], val[1])
    if tag == "i" and type(val) is str:
        return int(val, 16)
    raise WireError(f"unknown tag {tag!r}")


def decode_json(text: bytes):
    """Decode a tagged JSON document into fresh builtin objects (raises WireError)."""
    try:
        return json.loads(text, object_hook=_hook)
    except WireError:
        raise
    except (ValueError, TypeError, RecursionError) as e:
        raise WireError(f"malformed value: {e}") from None
