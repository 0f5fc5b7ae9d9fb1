"""Languages beyond Python in the code sandbox: toolchains, compiling inside the sandbox, a compile cache.

    from rewardlab.sandbox.languages import get_language, compile_program, run_program
    prog = compile_program("cpp", source)            # Program(ok, status, info, ...) - cached
    r = run_program(prog, stdin="2 3\\n", timeout=2)  # RunResult(status, stdout, stderr, exit_code, ...)

Every language runs as an *exec job* of the sandbox server (``sandbox/execjob.py``, ``run_exec``):
the confined worker W execs the compiler, the compiled program or the interpreter; it has no
channel to the checker, so what decides is what the trusted checker sees: the exit status and
the captured output. Compilers run there too, with their own time, memory and process limits;
the compiled files come back to the parent and are cached by ``(language, flags, sha256(source))``
(:class:`CompileCache`), so the tests of a problem (and every identical completion of a batch)
compile once. Python keeps its own job kind (CPython's end of program, see ``sandbox/pymodes.py``).

Toolchains are the Debian packages under ``/usr`` (the sandbox uid cannot use ``/root/.cargo``):
``gcc``, ``g++``, a JDK under ``/usr/lib/jvm``, ``nodejs``, ``bash``, ``golang-go``, ``rustc``.
:func:`available` says which work here and, for the others, why not (a JDK whose configuration
lives in ``/etc`` cannot start inside the sandbox, which exposes no ``/etc``).
"""

from __future__ import annotations

import base64
import glob
import hashlib
import os
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from rewardlab.errors import RewardlabError
from rewardlab.sandbox.isolation import load_runtime_module
from rewardlab.sandbox.parent import Limits, SandboxPool, get_pool

wire = load_runtime_module("wire")

_VERDICT_CAP = 160 << 20


@dataclass(frozen=True)
class Language:
    """How one language compiles and runs inside the sandbox."""

    name: str
    aliases: tuple[str, ...]
    source: str  # file name of the source in the scratch dir ("{cls}" for Java's public class)
    run: tuple[str, ...]  # argv of a run ("{cls}" for Java)
    compile: tuple[str, ...] | None = None  # argv of the compile step, None for interpreters
    artifacts: tuple[str, ...] = ()  # file patterns the compile step leaves and the runs need
    tools: tuple[str, ...] = ()  # executables that must exist (absolute paths)
    env: tuple[tuple[str, str], ...] = ()  # extra environment of compile and run ("{job}": scratch dir)
    run_as_mb: int | None = None  # address space of a run (JVM, V8 reserve far more than they use)
    compile_as_mb: int = 4096
    compile_memory_mb: int = 1536  # resident memory of the whole compile job
    nproc: int = 32
    compile_nproc: int = 64


_SETUP_JDK = "/usr/lib/jvm/rewardlab-jdk"


def _jdk() -> tuple[str | None, str]:
    """A JDK usable inside the sandbox: its ``lib/jvm.cfg`` and security config must resolve under
    /usr (Debian's openjdk links them to /etc/java-*, which the sandbox does not expose). First
    ``REWARDLAB_SANDBOX_JAVA_HOME``, then the one ``setup.sh`` makes from Debian's openjdk-17 with
    jlink (``/usr/lib/jvm/rewardlab-jdk``), then any other JDK under /usr/lib/jvm, newest name first."""
    cands = [os.environ.get("REWARDLAB_SANDBOX_JAVA_HOME") or "", _SETUP_JDK] + sorted(glob.glob("/usr/lib/jvm/*"),
                                                                                        reverse=True)
    why = "no JDK under /usr/lib/jvm (bash setup.sh as root makes one: apt-get install openjdk-17-jdk-headless + jlink)"
    for home in cands:
        if not home or not os.path.isfile(os.path.join(home, "bin", "javac")):
            continue
        real = os.path.realpath(home)
        needed = [os.path.join(real, "lib", "jvm.cfg"), os.path.join(real, "conf", "security", "java.security")]
        outside = [p for p in needed if not os.path.realpath(p).startswith("/usr/")]
        if not outside and real.startswith("/usr/"):
            return real, ""
        why = (f"the JDK at {real} keeps its configuration in /etc "
               f"({os.path.realpath(outside[0]) if outside else real}),"
               " which the sandbox does not expose; install a self-contained JDK under /usr/lib/jvm (Temurin) or"
               " make one (what setup.sh does): jlink --add-modules java.se,jdk.compiler,jdk.zipfs --output "
               f"{_SETUP_JDK}")
    return None, why


_JAVA_HOME, _JAVA_WHY = _jdk()
_J = _JAVA_HOME or "/usr/lib/jvm/none"
_JVM_RUN = ("-XX:+UseSerialGC", "-XX:-UsePerfData", "-Xshare:auto", "-XX:TieredStopAtLevel=1",
            "-XX:ReservedCodeCacheSize=64m", "-XX:MaxMetaspaceSize=128m", "-XX:CompressedClassSpaceSize=64m")

LANGUAGES: dict[str, Language] = {lang.name: lang for lang in (
    Language("python", ("python", "python3", "py", "py3"), "solution.py", ()),
    Language("c", ("c", "gcc"), "main.c", ("./main",),
             ("/usr/bin/gcc", "-O2", "-std=gnu17", "-pipe", "-o", "main", "main.c", "-lm"), ("main",),
             ("/usr/bin/gcc",)),
    Language("cpp", ("cpp", "c++", "cxx", "cc", "g++"), "main.cpp", ("./main",),
             ("/usr/bin/g++", "-O2", "-std=gnu++17", "-pipe", "-o", "main", "main.cpp"), ("main",),
             ("/usr/bin/g++",)),
    Language("java", ("java",), "{cls}.java",
             (f"{_J}/bin/java", "-Xmx256m", "-Xss64m", *_JVM_RUN, "-cp", ".", "{cls}"),
             (f"{_J}/bin/javac", "-J-Xmx384m", "-J-XX:+UseSerialGC", "-J-XX:-UsePerfData", "-J-Xshare:auto",
              "-J-XX:TieredStopAtLevel=1", "-encoding", "UTF-8", "-nowarn", "-d", ".", "{cls}.java"),
             ("*.class",), (f"{_J}/bin/java", f"{_J}/bin/javac"), run_as_mb=2048, nproc=48),
    Language("javascript", ("javascript", "js", "node", "nodejs"), "main.js",
             ("/usr/bin/node", "--max-old-space-size=256", "main.js"), tools=("/usr/bin/node",),
             env=(("OPENSSL_CONF", "/dev/null"),), run_as_mb=4096),  # tier B: /etc/ssl is not readable
    Language("bash", ("bash", "sh", "shell"), "main.sh", ("/usr/bin/bash", "main.sh"), tools=("/usr/bin/bash",)),
    Language("go", ("go", "golang"), "main.go", ("./main",),
             ("/usr/bin/go", "build", "-o", "main", "-ldflags=-s -w", "main.go"), ("main",),
             ("/usr/bin/go",), env=(("GOCACHE", "{job}/.gocache"), ("GOPATH", "{job}/.gopath"),
                                    ("GO111MODULE", "off"), ("CGO_ENABLED", "0"), ("GOTOOLCHAIN", "local"),
                                    ("GOFLAGS", "-p=2"), ("GOMAXPROCS", "2"), ("GOTELEMETRY", "off")),
             run_as_mb=2048),
    Language("rust", ("rust", "rs"), "main.rs", ("./main",),
             ("/usr/bin/rustc", "-O", "--edition", "2021", "-C", "strip=symbols", "-C", "codegen-units=4", "-C",
              "linker=/usr/bin/gcc",
              "-o", "main", "main.rs"), ("main",), ("/usr/bin/rustc",)),
)}

_ALIASES = {a: lang.name for lang in LANGUAGES.values() for a in (lang.name, *lang.aliases)}


def get_language(name: str | None) -> Language | None:
    """The language for a fence tag or a reference's ``language`` (case-insensitive), or None."""
    if not name:
        return None
    key = _ALIASES.get(str(name).strip().lower())
    return LANGUAGES[key] if key else None


_avail_lock = threading.Lock()
_avail: dict[str, str | None] = {}


def unavailable_reason(name: str) -> str | None:
    """None when ``name`` can run here, else why not."""
    lang = get_language(name)
    if lang is None:
        return f"unknown language {name!r}"
    with _avail_lock:
        if lang.name in _avail:
            return _avail[lang.name]
        why = None
        if lang.name == "java" and _JAVA_HOME is None:
            why = _JAVA_WHY
        for tool in lang.tools:
            if why:
                break
            real = os.path.realpath(tool)
            if not os.path.isfile(real):
                pkg = {"go": "golang-go", "rust": "rustc", "javascript": "nodejs"}.get(lang.name, lang.name)
                why = f"{tool} is not installed (apt-get install {pkg})"
            elif not real.startswith("/usr/") or not os.stat(real).st_mode & 0o001:
                why = f"{real} is not under /usr or not executable by the sandbox uid"
        _avail[lang.name] = why
        return why


def available() -> dict[str, str | None]:
    """Every language -> None (usable here) or the reason it is not."""
    return {name: unavailable_reason(name) for name in LANGUAGES}


# at the start of a line or after ';' / '}' (``import java.util.*; public class Solution {`` on one line)
_PUBLIC_CLASS = re.compile(r"(?:^|[;}])\s*public\s+(?:final\s+|abstract\s+)*class\s+([A-Za-z_$][\w$]*)", re.M)


def _java_class(source: str) -> str:
    """The public class (the file must be named after it), else ``Main``."""
    m = _PUBLIC_CLASS.search(source)
    return m.group(1) if m else "Main"


def _fill(args: tuple[str, ...], cls: str) -> list[str]:
    return [a.replace("{cls}", cls) for a in args]


# ------------------------------------------------------------------------------ transport
def _job(pool: SandboxPool, header: dict, body: dict) -> dict:
    """Send one job to a warm server of ``pool`` and return the server's verdict dict (the same
    hand-off as ``SandboxPool.execute``, with a cap that fits compiled files and full output)."""
    t0 = time.monotonic()
    timeout = float(header["timeout"])
    for attempt in (0, 1):
        try:
            srv = pool._acquire()
        except RewardlabError as e:
            return {"status": "sandbox_error", "error": str(e)}
        sent = False
        try:
            wire.send(srv.win, header, time.monotonic() + 10)
            sent = True
            wire.send(srv.win, body, time.monotonic() + 30)
            srv.runs += 1
            verdict = wire.recv(srv.rout, time.monotonic() + timeout + 15,
                                cap=_VERDICT_CAP + 6 * int(header.get("output_cap") or 0))  # as the server's
        except wire.Late:
            pool._release(srv, False)
            return {"status": "timeout", "error": "the sandbox server missed its deadline and was killed"}
        except (wire.WireError, OSError) as e:
            pool._release(srv, False)
            if not sent and attempt == 0:
                continue
            return {"status": "sandbox_error", "error": f"sandbox server failed: {e}"}
        if not isinstance(verdict, dict) or "status" not in verdict:
            pool._release(srv, False)
            return {"status": "sandbox_error", "error": "malformed verdict"}
        pool._release(srv, not verdict.pop("recycle", False))
        verdict["wall"] = round(time.monotonic() - t0, 6)
        verdict["tier"] = pool.tier.name
        return verdict
    raise AssertionError("unreachable")


def _header(timeout: float, lim: Limits, *, memory_mb: int | None = None, as_mb: int | None = None,
            nproc: int | None = None) -> dict:
    return {"op": "run", "timeout": float(timeout), "memory_mb": int(memory_mb or lim.memory_mb),
            "as_mb": int(as_mb or memory_mb or lim.memory_mb), "file_mb": lim.file_mb, "nofile": lim.nofile,
            "nproc": int(nproc or lim.nproc), "disk_mb": lim.disk_mb, "result_cap": lim.result_kb << 10,
            "output_cap": lim.output_kb << 10}


def file_entry(data: bytes | str, mode: int = 0o644) -> dict:
    """One file of a sandbox job's ``files`` map: its bytes in base64 and its mode."""
    raw = data.encode() if isinstance(data, str) else data
    return {"b64": base64.b64encode(raw).decode(), "mode": mode}


# ------------------------------------------------------------------------------ compiling
@dataclass
class Program:
    """A program ready to run: the files of its scratch dir and the argv that runs it."""

    language: str
    ok: bool
    status: str  # "ok" | "compile_error" | "sandbox_error" | "unavailable"
    argv: list[str] = field(default_factory=list)
    files: dict[str, dict] = field(default_factory=dict)
    source: str = ""
    info: dict[str, Any] = field(default_factory=dict)  # compile_status, error (compiler's first lines), compile_s
    cached: bool = False


class CompileCache:
    """Compiled programs by ``(language, flags, sha256(source))``, least recently used out first,
    bounded in bytes. Compile errors the compiler itself reported are cached too (the same source
    fails the same way); timeouts, memory and crashes are not (see ``_deterministic``). One
    compile per key at a time: other threads wanting it wait for its result."""

    def __init__(self, max_bytes: int = 512 << 20) -> None:
        self.max_bytes = max_bytes
        self._d: OrderedDict[tuple, tuple[Program, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._busy: dict[tuple, threading.Event] = {}
        self.hits = 0
        self.misses = 0

    def get_or_compile(self, key: tuple, make) -> Program:
        while True:
            with self._lock:
                got = self._d.get(key)
                if got is not None:
                    self._d.move_to_end(key)
                    self.hits += 1
                    prog = got[0]
                    return Program(prog.language, prog.ok, prog.status, prog.argv, prog.files, prog.source,
                                   dict(prog.info), cached=True)
                ev = self._busy.get(key)
                if ev is None:
                    ev = self._busy[key] = threading.Event()
                    self.misses += 1
                    break
            ev.wait()
        try:
            prog = make()
            if _deterministic(prog):  # timeouts, memory, crashes, sandbox failures are not remembered
                size = sum(len(f["b64"]) for f in prog.files.values()) + len(prog.source) + 256
                with self._lock:
                    self._d[key] = (prog, size)
                    self._bytes += size
                    while self._bytes > self.max_bytes and len(self._d) > 1:
                        _, (_, s) = self._d.popitem(last=False)
                        self._bytes -= s
            return prog
        finally:
            with self._lock:
                self._busy.pop(key, None)
            ev.set()

    def stats(self) -> dict:
        with self._lock:
            total = self.hits + self.misses
            return {"hits": self.hits, "misses": self.misses, "entries": len(self._d), "bytes": self._bytes,
                    "hit_rate": self.hits / total if total else 0.0}


CACHE = CompileCache()


# what a compiler prints when the machine, not the source, failed it (full disk, no processes or
# memory left, a signal): such an error says nothing about the source and is never remembered
_EXHAUSTED = re.compile(r"no space left on device|disk quota exceeded|resource temporarily unavailable|"
                        r"\beagain\b|\benospc\b|\benomem\b|vfork|cannot fork|fork: |cannot allocate memory|"
                        r"out of memory|too many open files|^\s*killed\s*$|signal terminated|terminated by signal|"
                        r"file size limit", re.I | re.M)  # a line "Killed" is the OOM killer, not an identifier


def _deterministic(prog: Program) -> bool:
    """Will the same source compile the same way next time? A success, or the compiler's own
    verdict (non-zero exit, no program); not a timeout, memory cap or crash, which depend on the
    limits, the load or the server and must not turn a correct source into a remembered 0; nor an
    error whose output shows exhausted resources (``_EXHAUSTED``: a job before this one may have
    filled the disk or the process table)."""
    if prog.status == "ok":
        return True
    if prog.info.get("exhausted") or _EXHAUSTED.search(str(prog.info.get("error") or "")):
        return False
    return prog.status == "compile_error" and prog.info.get("compile_status") in ("error", "ran")


def compile_program(language: str, source: str, *, timeout: float = 30.0, pool: SandboxPool | None = None,
                    cache: CompileCache | None = None, limits: Limits | None = None) -> Program:
    """Compile ``source`` inside the sandbox (cached). Interpreted languages need no step; their
    Program carries the source file. A compiler failure is ``status="compile_error"`` with the
    compiler's first lines in ``info["error"]``."""
    lang = get_language(language)
    if lang is None:
        return Program(str(language), False, "unavailable", info={"error": f"unknown language {language!r}"})
    why = unavailable_reason(lang.name)
    if why:
        return Program(lang.name, False, "unavailable", info={"error": why})
    cls = _java_class(source) if lang.name == "java" else "Main"
    src_name = lang.source.replace("{cls}", cls)
    if lang.compile is None:
        return Program(lang.name, True, "ok", _fill(lang.run, cls), {src_name: file_entry(source)}, source)
    flags = tuple(_fill(lang.compile, cls))
    key = (lang.name, flags, hashlib.sha256(source.encode()).hexdigest())
    pool = pool or get_pool()
    lim = limits or pool.limits

    def make() -> Program:
        t0 = time.monotonic()
        body = {"kind": "exec", "argv": list(flags), "files": {src_name: file_entry(source)}, "stdin": "",
                "env": dict(lang.env), "collect": list(lang.artifacts)}
        v = _job(pool, _header(timeout, lim, memory_mb=lang.compile_memory_mb, as_mb=lang.compile_as_mb,
                               nproc=lang.compile_nproc), body)
        info = {"compile_status": v["status"], "compile_s": round(time.monotonic() - t0, 3)}
        if v["status"] == "ran":
            files = v.get("files") or {}
            if not files:
                return Program(lang.name, False, "compile_error", source=source,
                               info=dict(info, error="the compiler produced no program"))
            return Program(lang.name, True, "ok", _fill(lang.run, cls), files, source, info)
        if v["status"] == "sandbox_error":
            return Program(lang.name, False, "sandbox_error", source=source, info=dict(info, error=v.get("error")))
        text = (v.get("stderr") or "") + (v.get("stdout") or "")
        if _EXHAUSTED.search(text + str(v.get("error") or "")):
            info["exhausted"] = True  # the machine failed the compile, not the source: not cached
        lines = [ln for ln in text.splitlines() if ln.strip()][:12]
        err = "\n".join(lines)[:2000] or str(v.get("error") or v["status"])
        if v["status"] != "error":
            err = f"compiler {v['status']}: {v.get('error') or ''}".strip() + ("\n" + err if lines else "")
        return Program(lang.name, False, "compile_error", source=source, info=dict(info, error=err))

    return (cache or CACHE).get_or_compile(key, make)


# ------------------------------------------------------------------------------ running
@dataclass
class RunResult:
    """One run of a program: ``status`` is ``ran`` (a normal end: exit status 0, or for Python
    CPython's normal end), ``error`` (non-zero exit / uncaught exception), ``crash``, ``timeout``,
    ``memory``, ``output_limit`` or ``sandbox_error``."""

    status: str
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    elapsed: float = 0.0
    error: str | None = None
    tier: str | None = None


def run_program(program: Program, stdin: str = "", *, timeout: float = 5.0, pool: SandboxPool | None = None,
                limits: Limits | None = None, extra_files: dict[str, str | bytes] | None = None,
                argv_extra: list[str] | None = None) -> RunResult:
    """Run a compiled (or interpreted) program once in the sandbox with ``stdin``."""
    if not program.ok:
        raise RewardlabError(f"cannot run a program that did not compile ({program.status})")
    pool = pool or get_pool()
    lim = limits or pool.limits
    lang = LANGUAGES[program.language]
    if lang.name == "python" and not program.argv:  # CPython's own job kind (its end of program)
        body = {"kind": "stdio", "solution": program.source, "tests": None, "entry_point": None, "prelude": None,
                "stdin": stdin, "expected_stdout": "", "legacy": False, "partial": False, "full_stdout": True}
        v = _job(pool, _header(timeout, lim), body)
        st = v["status"]
        if st in ("pass", "fail"):
            st = "ran"
        return RunResult(st, v.get("stdout") or "", v.get("traceback") or "", 0 if st == "ran" else None,
                         float(v.get("elapsed") or 0.0), v.get("error") if st != "ran" else None, v.get("tier"))
    files = dict(program.files)
    for name, data in (extra_files or {}).items():
        files[name] = file_entry(data)
    body = {"kind": "exec", "argv": list(program.argv) + list(argv_extra or []), "files": files, "stdin": stdin,
            "env": dict(lang.env)}
    v = _job(pool, _header(timeout, lim, as_mb=lang.run_as_mb, nproc=lang.nproc), body)
    return RunResult(v["status"], v.get("stdout") or "", v.get("stderr") or "", v.get("exit_code"),
                     float(v.get("elapsed") or 0.0), v.get("error"), v.get("tier"))
