"""Isolation tiers for the code sandbox (parent side): detection and the command line that starts a server.

Tiers, chosen automatically (``detect_tier()``) and always reported. ``auto`` falls back from A to
B only where user namespaces do not work (the reason is in tier B's summary); where they work and
tier A still fails to start, it is an error naming the cause, never a silent fall-back:

* **A** - bubblewrap: ``--unshare-all --die-with-parent --new-session --clearenv``, read-only
  ``/usr``, private ``/proc``, ``/dev`` and a size-capped tmpfs ``/tmp``; no ``/home``, ``/etc``,
  host ``/tmp`` or network. Needs working (unprivileged) user namespaces.
* **B** - no namespaces (Docker's default seccomp profile, Ubuntu 24.04's restrictions): a
  non-root uid (the ``rewardlab-sandbox`` user when the trainer is root; the trainer's own uid
  otherwise, which then requires Landlock ABI >= 6 so the code cannot signal the trainer),
  plus Landlock and seccomp applied by the worker itself.
* **unsafe** - only the rlimits, deadlines and process cleanup; no isolation. Used only when
  asked for explicitly (``REWARDLAB_SANDBOX_TIER=unsafe`` or ``tier="unsafe"``).

Every tier also gets hard rlimits, an outside wall-clock deadline, whole-tree kills, output
caps, closed stdin, a scrubbed environment and a fresh scratch dir per run (see
``sandbox/server.py``). When the trainer runs as root, untrusted code is never run as root:
``sandbox/launch.py`` drops to the sandbox uid before bubblewrap or the server starts.

Environment: ``REWARDLAB_SANDBOX_TIER`` (auto|A|B|unsafe), ``REWARDLAB_SANDBOX_USER``
(default ``rewardlab-sandbox``, falling back to ``nobody``), ``REWARDLAB_SANDBOX_PYTHON``.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import importlib.util
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from rewardlab.errors import RewardlabError

RUNTIME_FILES = ("server.py", "worker.py", "checker.py", "pymodes.py", "execjob.py", "wire.py", "confine.py",
                 "scrub.py", "launch.py", "reaper.py", "__init__.py")
INSIDE_RUNTIME = "/opt/rewardlab-sandbox"
TMPFS_BYTES = 256 << 20
TIERS: tuple[str, ...] = ("auto", "A", "B", "unsafe")
"""What ``--tier`` / ``REWARDLAB_SANDBOX_TIER`` accept: auto (the strongest available), a tier by name, or no
isolation at all (unsafe, asked for explicitly)."""


@dataclass(frozen=True)
class Tier:
    """How sandboxed code will run here."""

    name: str  # "A" | "B" | "unsafe"
    description: str
    python: str
    runtime: str
    drop_to: tuple[int, int] | None = None  # (uid, gid) when the trainer is root
    landlock_abi: int = 0
    seccomp: bool = False
    bwrap: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def argv(self) -> list[str]:
        """The command that starts one fork server for this tier."""
        if self.name == "A":
            inner = [self.python, "-I", "-S", f"{INSIDE_RUNTIME}/server.py"]
            cmd = [self.bwrap or "bwrap", *_bwrap_args(self.python, self.runtime), "--", *inner]
        else:  # no PID namespace: the reaper outlives the server and kills what is left of its jobs
            cmd = [self.python, "-I", "-S", os.path.join(self.runtime, "reaper.py"), "--",
                   self.python, "-I", "-S", os.path.join(self.runtime, "server.py")]
        if self.drop_to is not None:
            uid, gid = self.drop_to
            cmd = [self.python, "-I", "-S", os.path.join(self.runtime, "launch.py"), str(uid), str(gid), "--", *cmd]
        return cmd

    def server_config(self) -> dict:
        """The first frame every server receives."""
        if self.name == "A":
            reads = [*SYSTEM_DIRS, INSIDE_RUNTIME, *interpreter_paths(self.python)]
            return {"tier": "A", "read_paths": reads, "landlock": self.landlock_abi >= 1,
                    "seccomp": self.seccomp, "nproc_mode": "ns", "scratch_parent": "/tmp", "ipc_ns": True}
        reads = [*SYSTEM_DIRS, "/etc/ld.so.cache", self.runtime, *interpreter_paths(self.python)]
        return {"tier": self.name, "read_paths": reads, "landlock": self.name == "B",
                "seccomp": self.name == "B" and self.seccomp, "nproc_mode": "uid",
                "scratch_parent": os.environ.get("REWARDLAB_SANDBOX_TMP") or "/tmp"}

    def summary(self) -> str:
        who = f"uid {self.drop_to[0]}" if self.drop_to else f"uid {os.getuid()}"
        extra = f", Landlock ABI {self.landlock_abi}" if self.landlock_abi else ""
        extra += ", seccomp" if self.seccomp and self.name != "unsafe" else ""
        notes = "".join(f"; {n}" for n in self.notes)
        return f"tier {self.name}: {self.description} ({who}{extra}){notes}"


# ------------------------------------------------------------------------------ runtime files
_runtime_lock = threading.Lock()
_runtime_cache: dict[str, str] = {}


def _checkout_runtime_dir() -> Path | None:
    """``<checkout>/sandbox`` when this ``rewardlab`` was imported from a source checkout (a git
    worktree on ``PYTHONPATH`` runs its own sandbox, not the one an editable install maps)."""
    root = Path(__file__).resolve().parents[2]  # <checkout>/rewardlab/sandbox/isolation.py
    if (root / "pyproject.toml").is_file() and (root / "sandbox" / "server.py").is_file():
        return root / "sandbox"
    return None


def _package_runtime_dir() -> Path:
    here = _checkout_runtime_dir()
    if here is not None:
        return here
    try:
        return Path(str(importlib.resources.files("rewardlab.sandbox_runtime")))
    except ModuleNotFoundError:  # source checkout on sys.path without the installed mapping
        return Path(__file__).resolve().parents[2] / "sandbox"


def _world_usable(path: str, need_read: bool = True) -> bool:
    """Can an unrelated uid traverse to ``path`` and read (and execute) it?"""
    p = Path(path).resolve()
    try:
        for parent in list(p.parents):
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                return False
        mode = os.stat(p).st_mode
    except OSError:
        return False
    return bool(mode & stat.S_IROTH) if need_read else bool(mode & stat.S_IXOTH)


def runtime_dir() -> str:
    """The folder holding the sandbox program, readable by the sandbox uid.

    The packaged folder is used in place when any user can read it; otherwise (a checkout
    under /root, say) its files are copied once into a root-owned, world-readable folder under
    the temp dir, named by their content hash."""
    with _runtime_lock:
        if "dir" in _runtime_cache:
            return _runtime_cache["dir"]
        src = _package_runtime_dir().resolve()
        if all(_world_usable(str(src / f)) for f in RUNTIME_FILES):
            _runtime_cache["dir"] = str(src)
            return str(src)
        h = hashlib.sha256()
        for f in RUNTIME_FILES:
            h.update((src / f).read_bytes())
        target = Path(tempfile.gettempdir()) / f"rewardlab-runtime-{os.geteuid()}-{h.hexdigest()[:16]}"
        if not _trusted_copy(target, src):
            tmp = Path(tempfile.mkdtemp(prefix="rewardlab-runtime-"))
            for f in RUNTIME_FILES:
                shutil.copyfile(src / f, tmp / f)
                os.chmod(tmp / f, 0o644)
            os.chmod(tmp, 0o755)
            try:
                os.rename(tmp, target)
            except OSError:
                shutil.rmtree(tmp, ignore_errors=True)
                if not _trusted_copy(target, src):
                    raise RewardlabError(f"cannot prepare the sandbox runtime in {target}") from None
        _runtime_cache["dir"] = str(target)
        return str(target)


def _trusted_copy(target: Path, src: Path) -> bool:
    """``target`` exists, is ours, not writable by others, and holds exactly the runtime files."""
    try:
        st = os.lstat(target)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            return False
        for f in RUNTIME_FILES:
            fst = os.lstat(target / f)
            if not stat.S_ISREG(fst.st_mode) or fst.st_uid != os.geteuid() or fst.st_mode & 0o022:
                return False
            if (target / f).read_bytes() != (src / f).read_bytes():
                return False
        return True
    except OSError:
        return False


def load_runtime_module(name: str) -> ModuleType:
    """Import one of the stdlib-only sandbox modules (``confine``, ``wire``) into the parent."""
    try:
        if _checkout_runtime_dir() is not None:
            raise ModuleNotFoundError(name)  # the checkout's own copy, as for the servers
        return importlib.import_module(f"rewardlab.sandbox_runtime.{name}")
    except ModuleNotFoundError:
        loaded = sys.modules.get(f"rewardlab_sandbox_runtime_{name}")
        if loaded is not None:
            return loaded
        path = _package_runtime_dir() / f"{name}.py"
        spec = importlib.util.spec_from_file_location(f"rewardlab_sandbox_runtime_{name}", path)
        mod = importlib.util.module_from_spec(spec)
        assert spec.loader is not None
        spec.loader.exec_module(mod)
        sys.modules[spec.name] = mod
        return mod


# ------------------------------------------------------------------------------ detection
SYSTEM_DIRS = ("/usr", "/bin", "/lib", "/lib64", "/lib32", "/sbin")
_paths_lock = threading.Lock()
_paths_of: dict[str, tuple[str, ...]] = {}


def _under(path: str, dirs) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in dirs)


def interpreter_paths(python: str) -> tuple[str, ...]:
    """What the sandbox exposes of the interpreter beyond the system dirs: its own prefix and exec
    prefix (``sys.base_prefix`` / ``sys.base_exec_prefix``, as the interpreter itself reports them)
    and its executable, never a whole top-level directory (an interpreter under ``/home`` used to
    expose every home directory; one under ``/opt`` all of ``/opt``). Asked once per interpreter."""
    real = os.path.realpath(python)
    with _paths_lock:
        if real in _paths_of:
            return _paths_of[real]
        found: list[str] = []
        try:
            ask = "import sys;print(sys.base_prefix);print(sys.base_exec_prefix)"
            r = subprocess.run([real, "-I", "-S", "-c", ask],
                               stdin=subprocess.DEVNULL, capture_output=True, timeout=30,
                               env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
            found = [os.path.realpath(x) for x in r.stdout.decode(errors="replace").splitlines() if x.strip()]
        except (OSError, subprocess.TimeoutExpired):
            pass
        out: list[str] = []
        for p in [q for q in found if q != "/"] + [real]:  # "/" would be everything: never exposed
            if not _under(p, SYSTEM_DIRS) and not _under(p, out):
                out.append(p)
        _paths_of[real] = tuple(out)
        return _paths_of[real]


def _bwrap_args(python: str, runtime: str) -> list[str]:
    args = ["--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
            "--ro-bind", "/usr", "/usr"]
    for d in SYSTEM_DIRS[1:]:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    for p in interpreter_paths(python):
        args += ["--ro-bind", p, p]
    args += ["--ro-bind", runtime, INSIDE_RUNTIME, "--proc", "/proc", "--dev", "/dev",
             "--size", str(TMPFS_BYTES), "--tmpfs", "/tmp", "--chdir", "/tmp",
             "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8",
             "--setenv", "HOME", "/tmp"]
    return args


def _sandbox_user() -> tuple[tuple[int, int] | None, str]:
    """(uid, gid) to drop to when root, and whether that uid is dedicated to the sandbox."""
    names = [os.environ.get("REWARDLAB_SANDBOX_USER") or "rewardlab-sandbox", "nobody"]
    for name in names:
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            continue
        if pw.pw_uid != 0:
            return (pw.pw_uid, pw.pw_gid), name
    return None, ""


def _interpreter(root: bool) -> str:
    py = os.environ.get("REWARDLAB_SANDBOX_PYTHON") or os.path.realpath(sys.executable)
    if root and not _world_usable(py, need_read=False):
        for alt in ("/usr/bin/python3", "/usr/local/bin/python3"):
            if os.path.exists(alt) and _world_usable(alt, need_read=False):
                return os.path.realpath(alt)
    return py


def _probe_bwrap(bwrap: str, python: str, runtime: str, drop_to: tuple[int, int] | None,
                 namespaces_only: bool = False) -> str | None:
    """None when bubblewrap can start the interpreter here, else the reason. ``namespaces_only``:
    can it start anything at all (user namespaces work), whatever our command line adds?"""
    cmd = [bwrap, *_bwrap_args(python, runtime), "--", python, "-I", "-S", "-c", "pass"]
    if namespaces_only:
        cmd = [bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--", "/bin/sh", "-c", ":"]
    if drop_to is not None:
        cmd = [python, "-I", "-S", os.path.join(runtime, "launch.py"), str(drop_to[0]), str(drop_to[1]), "--", *cmd]
    try:
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=20,
                           env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bubblewrap probe failed: {e}"
    if r.returncode != 0:
        err = r.stderr.decode(errors="replace").strip().splitlines()
        return "bubblewrap probe failed: " + (err[-1] if err else f"exit status {r.returncode}")
    return None


def _tier_b_gaps(abi: int) -> str:
    """What tier B does not give that tier A does (README, security section), said at start-up."""
    gaps = ["SysV IPC and POSIX message queues are refused, not private", "no PID namespace (the host's PID "
            "counter is visible to jobs)", "RLIMIT_NPROC is the sandbox uid's on the host, shared by concurrent "
            "jobs", "the scratch dir is on the host's /tmp (the disk cap is the checker's)"]
    if abi < 6:
        gaps.append(f"Landlock ABI {abi} < 6: jobs can signal other processes of the sandbox uid (other jobs, "
                    "checkers, servers)")
    return "tier B does not give: " + "; ".join(gaps)


_detect_lock = threading.Lock()
DETECTED_TIERS: dict[str, Tier] = {}


def detect_tier(force: str | None = None) -> Tier:
    """The isolation tier to use (``force``: "auto", "A", "B" or "unsafe"; default from
    ``REWARDLAB_SANDBOX_TIER``). Raises RewardlabError when the requested tier, or with "auto"
    every tier, is unavailable."""
    want = (force or os.environ.get("REWARDLAB_SANDBOX_TIER") or "auto").strip()
    want = want.upper() if want.lower() in ("a", "b") else want.lower()
    if want not in TIERS:
        raise RewardlabError(f"unknown sandbox tier {want!r}; use one of {', '.join(TIERS)}")
    with _detect_lock:
        if want in DETECTED_TIERS:
            return DETECTED_TIERS[want]
        tier = _detect(want)
        DETECTED_TIERS[want] = tier
        return tier


def _detect(want: str) -> Tier:
    root = os.geteuid() == 0
    runtime = runtime_dir()
    python = _interpreter(root)
    confine = load_runtime_module("confine")
    abi = confine.landlock_abi()
    seccomp = confine.seccomp_arch() is not None
    drop_to, user = _sandbox_user() if root else (None, "")
    reasons: list[str] = []
    if root and drop_to is None:
        reasons.append("running as root and no non-root user (rewardlab-sandbox or nobody) exists")
    if want == "unsafe":
        return Tier("unsafe", "NO ISOLATION (explicitly requested): rlimits and deadlines only",
                    python, runtime, drop_to=drop_to, landlock_abi=0, seccomp=False,
                    notes=("untrusted code can read and write what the sandbox uid can",))
    if want in ("auto", "A") and not (root and drop_to is None):
        bwrap = shutil.which("bwrap")
        why = "bubblewrap (bwrap) is not installed" if bwrap is None else _probe_bwrap(bwrap, python, runtime, drop_to)
        if why is None:
            return Tier("A", "bubblewrap namespaces" + (f" as user {user}" if user else ""), python, runtime,
                        drop_to=drop_to, landlock_abi=abi, seccomp=seccomp, bwrap=bwrap)
        if bwrap is not None and _probe_bwrap(bwrap, python, runtime, drop_to, namespaces_only=True) is None:
            # namespaces work: tier A is broken by its own set-up here; never a silent fall-back to B
            raise RewardlabError(f"tier A failed to start although user namespaces work here: {why}. Fix it, "
                                 "or choose the weaker tier explicitly (REWARDLAB_SANDBOX_TIER=B)")
        reasons.append(f"tier A unavailable: {why}")
    if want in ("auto", "B"):
        shared_uid = (not root) or user == "nobody"
        need = 6 if shared_uid else 1
        if abi < need:
            reasons.append(f"tier B unavailable: needs Landlock ABI >= {need} here, kernel has {abi}")
        elif not seccomp:
            reasons.append("tier B unavailable: no seccomp filter for this architecture")
        elif root and drop_to is None:
            pass
        else:
            return Tier("B", "dedicated uid + rlimits + Landlock + seccomp, no namespaces"
                        + (f" as user {user}" if user else ""), python, runtime, drop_to=drop_to,
                        landlock_abi=abi, seccomp=True,
                        notes=(*(r for r in reasons if want == "auto"), _tier_b_gaps(abi)))
    raise RewardlabError("no sandbox isolation tier is available: " + "; ".join(reasons)
                         + ". Install bubblewrap (apt-get install bubblewrap) or run setup.sh; "
                         "REWARDLAB_SANDBOX_TIER=unsafe runs untrusted code WITHOUT isolation")
