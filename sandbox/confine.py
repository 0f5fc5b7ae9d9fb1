"""Self-confinement primitives for the sandbox: rlimits, Landlock and seccomp through ctypes.

Stdlib only (this file runs inside the isolation and is also imported by the parent to probe
what the kernel offers). Nothing here needs privileges: every call restricts the calling
process (and its future children) and can never be undone by it.

* ``landlock_abi()``: the Landlock ABI version (0 when unavailable).
* ``landlock_ruleset(read_paths, write_paths)`` then ``landlock_restrict(fd)`` (or
  ``apply_landlock`` for both): file-system allow-list, no TCP bind/connect
  (ABI >= 4), and scoping (ABI >= 6) so that the process cannot signal processes outside its
  domain or reach abstract unix sockets. Ptrace of processes outside the domain is always denied.
* ``apply_seccomp()``: a small BPF deny-list (ptrace, process_vm_*, socket, mount/namespace
  calls, bpf, io_uring, keyrings, kernel modules, kill(-1), clone with namespace flags, ...).
  Supported architectures: x86_64 and aarch64.
* ``set_rlimits(...)``: address space, CPU, file size, open files, processes, no core dumps.

Landlock and seccomp both require ``PR_SET_NO_NEW_PRIVS``, which ``no_new_privs()`` sets.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import signal
import struct

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38
PR_SET_CHILD_SUBREAPER = 36

_SYS_LANDLOCK_CREATE_RULESET = 444
_SYS_LANDLOCK_ADD_RULE = 445
_SYS_LANDLOCK_RESTRICT_SELF = 446

# Landlock access rights (linux/landlock.h).
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6
_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV


def prctl(option: int, arg: int = 0) -> None:
    """prctl(option, arg, 0, 0, 0); raises OSError on failure."""
    if _libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"prctl({option}): {os.strerror(e)}")


def no_new_privs() -> None:
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when Landlock is missing or disabled."""
    v = _libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return int(v) if v > 0 else 0


def _fs_mask(abi: int) -> int:
    mask = (1 << 13) - 1  # ABI 1: EXECUTE .. MAKE_SYM
    if abi >= 2:
        mask |= FS_REFER
    if abi >= 3:
        mask |= FS_TRUNCATE
    if abi >= 5:
        mask |= FS_IOCTL_DEV
    return mask


def landlock_ruleset(read_paths: list[str], write_paths: list[str], *, abi: int | None = None) -> int:
    """A Landlock ruleset fd: read/execute under ``read_paths``, everything under ``write_paths``,
    nothing else; no TCP (ABI >= 4); signals and abstract unix sockets scoped to the domain
    (ABI >= 6). Missing paths are skipped. Build it once, then ``landlock_restrict(fd)`` in each
    process to confine (the fd survives fork). Raises OSError when Landlock is unusable."""
    abi = landlock_abi() if abi is None else abi
    if abi < 1:
        raise OSError(errno.ENOSYS, "Landlock is not available")
    handled_fs = _fs_mask(abi)
    handled_net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0
    if abi >= 6:
        attr = struct.pack("=QQQ", handled_fs, handled_net, scoped)
    elif abi >= 4:
        attr = struct.pack("=QQ", handled_fs, handled_net)
    else:
        attr = struct.pack("=Q", handled_fs)
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = _libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if fd < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"landlock_create_ruleset: {os.strerror(e)}")
    try:
        read_rights = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
        for paths, rights in ((read_paths, read_rights), (write_paths, handled_fs)):
            for p in paths:
                try:
                    pfd = os.open(p, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue
                try:
                    allowed = rights & handled_fs
                    if not os.path.isdir(p):
                        allowed &= _FILE_RIGHTS
                    rule = ctypes.create_string_buffer(struct.pack("=Qi", allowed, pfd), 12)
                    if _libc.syscall(_SYS_LANDLOCK_ADD_RULE, ctypes.c_int(fd), ctypes.c_int(1), rule,
                                     ctypes.c_uint32(0)) != 0:
                        e = ctypes.get_errno()
                        raise OSError(e, f"landlock_add_rule({p}): {os.strerror(e)}")
                finally:
                    os.close(pfd)
    except BaseException:
        os.close(fd)
        raise
    return int(fd)


def landlock_restrict(ruleset_fd: int) -> None:
    """Confine the calling process (and its future children) to the ruleset; irreversible."""
    no_new_privs()
    if _libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset_fd), ctypes.c_uint32(0)) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"landlock_restrict_self: {os.strerror(e)}")


def apply_landlock(read_paths: list[str], write_paths: list[str], *, abi: int | None = None) -> None:
    """``landlock_ruleset`` + ``landlock_restrict`` in one call."""
    fd = landlock_ruleset(read_paths, write_paths, abi=abi)
    try:
        landlock_restrict(fd)
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------ seccomp
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# name -> (x86_64 nr, aarch64 nr)
_DENY = {
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41), "chroot": (161, 51),
    "unshare": (272, 97), "setns": (308, 268), "bpf": (321, 280), "perf_event_open": (298, 241),
    "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218),
    "kexec_load": (246, 104), "kexec_file_load": (320, 294), "init_module": (175, 105),
    "finit_module": (313, 273), "delete_module": (176, 106), "userfaultfd": (323, 282),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "socket": (41, 198), "pidfd_send_signal": (424, 424), "pidfd_getfd": (438, 438),
    "open_by_handle_at": (304, 265), "name_to_handle_at": (303, 264), "fanotify_init": (300, 262),
    "syslog": (103, 116), "open_tree": (428, 428), "move_mount": (429, 429), "fsopen": (430, 430),
    "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433), "mount_setattr": (442, 442),
    "acct": (163, 89), "swapon": (167, 224), "swapoff": (168, 225), "reboot": (169, 142),
    "quotactl": (179, 60), "kcmp": (312, 272), "ioprio_set": (251, 30),
    # anonymous files the job only writes to hold memory outside every process's RSS (the guard's measure)
    "memfd_create": (319, 279), "memfd_secret": (447, 447),
}
# SysV IPC and POSIX message queues: refused where the job has no IPC namespace of its own (tier B)
_IPC = {
    "shmget": (29, 194), "shmat": (30, 196), "shmctl": (31, 195), "shmdt": (67, 197),
    "semget": (64, 190), "semop": (65, 193), "semctl": (66, 191), "semtimedop": (220, 192),
    "msgget": (68, 186), "msgsnd": (69, 189), "msgrcv": (70, 188), "msgctl": (71, 187),
    "mq_open": (240, 180), "mq_unlink": (241, 181), "mq_timedsend": (242, 182),
    "mq_timedreceive": (243, 183), "mq_notify": (244, 184), "mq_getsetattr": (245, 185),
}
# allowed only on the calling process itself (first argument, a pid, is 0)
_SELF_ONLY = {"sched_setaffinity": (203, 122), "sched_setscheduler": (144, 119), "sched_setparam": (142, 118),
              "sched_setattr": (314, 274)}
_PRLIMIT = (302, 261)  # prlimit64(pid, resource, new, old): a new limit only for pid 0
_SETPRIORITY = (141, 140)  # setpriority(which, who, prio): only PRIO_PROCESS, who 0
_CLONE = (56, 220)
_CLONE3 = (435, 435)
_KILL = (62, 129)
_NS_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000

_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_RET_KILL_PROCESS = 0x80000000
_LD_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET = 0x06  # BPF_RET | BPF_K


def seccomp_arch() -> str | None:
    """The machine name when this module knows its syscall numbers, else None."""
    m = os.uname().machine
    return m if m in _AUDIT_ARCH else None


def _assemble(prog: list[tuple]) -> bytes:
    """Tiny BPF assembler: items are (code, k, jt_label, jf_label) or ("label", name)."""
    labels, pc = {}, 0
    for ins in prog:
        if ins[0] == "label":
            labels[ins[1]] = pc
        else:
            pc += 1
    out, pc = [], 0
    for ins in prog:
        if ins[0] == "label":
            continue
        code, k, jt, jf = ins
        jt_off = labels[jt] - pc - 1 if isinstance(jt, str) else jt
        jf_off = labels[jf] - pc - 1 if isinstance(jf, str) else jf
        if not (0 <= jt_off < 256 and 0 <= jf_off < 256):
            raise ValueError("BPF jump out of range")
        out.append(struct.pack("=HBBI", code, jt_off, jf_off, k & 0xFFFFFFFF))
        pc += 1
    return b"".join(out)


def _arg(i: int, high: bool = False) -> int:
    """Offset of argument ``i`` (its low or high 32 bits) in ``struct seccomp_data``."""
    return 16 + 8 * i + (4 if high else 0)


def build_seccomp_filter(arch: str, deny_ipc: bool = False) -> bytes:
    """The deny-list filter for ``arch`` as raw ``struct sock_filter`` bytes; ``deny_ipc`` also
    refuses SysV IPC and POSIX message queues (for jobs without an IPC namespace of their own).
    Scheduling and limits of other processes are refused: ``prlimit64`` sets limits of pid 0
    only, ``setpriority`` acts on ``PRIO_PROCESS`` 0 only, ``sched_set*`` on pid 0 only."""
    i = 0 if arch == "x86_64" else 1
    prog: list[tuple] = [(_LD_ABS, 4, 0, 0), (_JEQ, _AUDIT_ARCH[arch], 0, "kill"), (_LD_ABS, 0, 0, 0)]
    if arch == "x86_64":
        prog.append((_JGE, 0x40000000, "eperm", 0))  # x32 ABI aliases
    for nrs in _DENY.values():
        prog.append((_JEQ, nrs[i], "eperm", 0))
    if deny_ipc:
        for nrs in _IPC.values():
            prog.append((_JEQ, nrs[i], "eperm", 0))
    for nrs in _SELF_ONLY.values():
        prog.append((_JEQ, nrs[i], "self_only", 0))
    prog += [
        (_JEQ, _PRLIMIT[i], "prlimit", 0),
        (_JEQ, _SETPRIORITY[i], "setpriority", 0),
        (_JEQ, _CLONE3[i], "enosys", 0),  # clone3 flags live in memory: make libc fall back to clone
        (_JEQ, _CLONE[i], "clone", 0),
        (_JEQ, _KILL[i], "kill_call", 0),
        (_RET, _RET_ALLOW, 0, 0),
        ("label", "clone"), (_LD_ABS, 16, 0, 0), (_JSET, _NS_FLAGS, "eperm", 0), (_RET, _RET_ALLOW, 0, 0),
        ("label", "kill_call"), (_LD_ABS, 16, 0, 0), (_JEQ, 0xFFFFFFFF, "eperm", 0), (_RET, _RET_ALLOW, 0, 0),
        # pid_t / int arguments: the kernel reads their low 32 bits only
        ("label", "self_only"), (_LD_ABS, _arg(0), 0, 0), (_JEQ, 0, "allow", "eperm"),
        ("label", "setpriority"), (_LD_ABS, _arg(0), 0, 0), (_JEQ, 0, 0, "eperm"),
        (_LD_ABS, _arg(1), 0, 0), (_JEQ, 0, "allow", "eperm"),
        # prlimit64: any pid may be read (new == NULL, all 64 bits), only pid 0 written
        ("label", "prlimit"), (_LD_ABS, _arg(0), 0, 0), (_JEQ, 0, "allow", 0),
        (_LD_ABS, _arg(2), 0, 0), (_JEQ, 0, 0, "eperm"), (_LD_ABS, _arg(2, True), 0, 0), (_JEQ, 0, "allow", "eperm"),
        ("label", "allow"), (_RET, _RET_ALLOW, 0, 0),
        ("label", "eperm"), (_RET, _RET_ERRNO | errno.EPERM, 0, 0),
        ("label", "enosys"), (_RET, _RET_ERRNO | errno.ENOSYS, 0, 0),
        ("label", "kill"), (_RET, _RET_KILL_PROCESS, 0, 0),
    ]
    return _assemble(prog)


_filter_cache: dict[tuple[str, bool], bytes] = {}


def prepare_seccomp() -> None:
    """Build the filters now (in a long-lived parent) so that applying one later is one syscall."""
    arch = seccomp_arch()
    if arch is not None:
        for deny_ipc in (False, True):
            _filter_cache[arch, deny_ipc] = build_seccomp_filter(arch, deny_ipc)


def apply_seccomp(deny_ipc: bool = False) -> None:
    """Install the deny-list filter on the calling thread (call while single-threaded)."""
    arch = seccomp_arch()
    if arch is None:
        raise OSError(errno.ENOSYS, f"seccomp filter not defined for {os.uname().machine}")
    code = _filter_cache.get((arch, deny_ipc))
    if code is None:
        code = _filter_cache[arch, deny_ipc] = build_seccomp_filter(arch, deny_ipc)
    n = len(code) // 8
    filt = ctypes.create_string_buffer(code, len(code))

    class _Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = _Prog(n, ctypes.cast(filt, ctypes.c_void_p))
    no_new_privs()
    if _libc.prctl(PR_SET_SECCOMP, ctypes.c_ulong(2), ctypes.byref(prog), 0, 0) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"seccomp: {os.strerror(e)}")


# ------------------------------------------------------------------------------ namespaces
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
_SYS_CAPSET = {"x86_64": 126, "aarch64": 91}


def private_ipc_namespace() -> None:
    """Move the calling (single-threaded) process into a new user namespace owning a new IPC
    namespace: SysV IPC objects and POSIX message queues made from here on are its own and its
    descendants', and are destroyed with the namespace when the last of them exits. The uid and
    gid stay the same (mapped 1:1); the capabilities the new user namespace grants are dropped
    at once. Raises OSError when the kernel refuses (no user namespaces; nothing changed), and
    RuntimeError when a later step fails (the process is then in the new namespace, perhaps still
    holding its capabilities: it must not run a job)."""
    uid, gid = os.getuid(), os.getgid()
    if _libc.unshare(ctypes.c_int(CLONE_NEWUSER | CLONE_NEWIPC)) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"unshare(CLONE_NEWUSER|CLONE_NEWIPC): {os.strerror(e)}")
    try:
        _map_and_drop_caps(uid, gid)
    except OSError as e:
        raise RuntimeError(f"private IPC namespace half set up: {e}") from None


def _map_and_drop_caps(uid: int, gid: int) -> None:
    # /proc/self files of a non-dumpable process belong to root: dumpable while we write our maps
    # (no untrusted code of this job exists yet; other jobs' workers cannot ptrace outside Landlock)
    dumpable = _libc.prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE
    if dumpable != 1:
        prctl(PR_SET_DUMPABLE, 1)
    try:
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            fd = os.open(f"/proc/self/{name}", os.O_WRONLY)
            try:
                os.write(fd, text.encode())
            finally:
                os.close(fd)
    finally:
        if dumpable != 1:
            prctl(PR_SET_DUMPABLE, 0)
    arch = seccomp_arch()
    if arch is None:
        raise OSError(errno.ENOSYS, "capset: unknown architecture")
    hdr = struct.pack("=Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = bytes(24)  # effective, permitted, inheritable: all empty (two 32-bit words each)
    if _libc.syscall(_SYS_CAPSET[arch], ctypes.c_char_p(hdr), ctypes.c_char_p(data)) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"capset: {os.strerror(e)}")


# ------------------------------------------------------------------------------ rlimits
def set_rlimits(*, memory_bytes: int, cpu_seconds: int, file_bytes: int, nofile: int, nproc: int) -> None:
    """Hard limits for the untrusted process (both soft and hard, so it cannot raise them)."""
    limits = [
        (resource.RLIMIT_AS, memory_bytes),
        (resource.RLIMIT_CPU, cpu_seconds),
        (resource.RLIMIT_FSIZE, file_bytes),
        (resource.RLIMIT_NOFILE, nofile),
        (resource.RLIMIT_NPROC, nproc),
        (resource.RLIMIT_CORE, 0),
    ]
    if hasattr(resource, "RLIMIT_MEMLOCK"):
        limits.append((resource.RLIMIT_MEMLOCK, 0))
    for which, value in limits:
        soft, hard = resource.getrlimit(which)
        v = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (v, v))


def children(pid: int) -> list[int]:
    """The children of every thread of ``pid`` (``/proc/<pid>/task/*/children``)."""
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tids:
        try:
            with open(f"/proc/{pid}/task/{t}/children") as fh:
                out += [int(x) for x in fh.read().split()]
        except (OSError, ValueError):
            pass
    return out


def kill_children(pid: int) -> None:
    """SIGKILL every descendant of ``pid`` that the ``/proc`` children walk finds now, each once (the caller reaps
    them, and walks again for orphans re-parented to it)."""
    stack, seen = children(pid), set()
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
        stack += children(p)
