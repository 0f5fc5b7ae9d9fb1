"""Between jobs: nothing one sandbox job does reaches the next job on the same fork server.

    PYTHONPATH=. .venv/bin/python -m pytest -q tests/test_sandbox_jobs.py

Issue 41. Each attack runs two jobs on a pool of ONE server (so both land on the same server),
in the auto tier (A where bubblewrap works) and in tier B:

* SysV IPC: job 1 solves "2 3" and stores its answer in a SysV shared-memory segment, message
  queue or semaphore; job 2 never computes anything and replays what it finds. Job 2 must not
  print 5. A segment a job created must not stay resident in the server's (tier A) or the host's
  (tier B) IPC namespace after the job.
* Limits outside the job: job 1 lowers its checker's and its fork server's rlimits (address
  space, open files, file size), nice value, CPU affinity and scheduling policy. Afterwards every
  server of the pool has the limits and scheduling it started with, and a correct job passes.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from rewardlab.sandbox import SandboxPool, isolation
from rewardlab.sandbox.languages import available, compile_program, run_program
from sandbox_tiers import TIERS, tier_available
from test_code_languages import descendants

AVAIL = available()
KEY = 0x5EED0041  # SysV keys of these tests (removed from the host afterwards)
SEG_MB = 32





@pytest.fixture(params=TIERS)
def one_server(request):
    pool = SandboxPool(1, tier=request.param)
    before = _host_ipc_ids()
    yield pool
    pool.close()
    _remove_host_ipc(before)


def _need(lang: str) -> None:
    if AVAIL[lang] is not None:
        pytest.skip(f"{lang} unavailable here: {AVAIL[lang]}")


def _run(pool, lang: str, src: str, stdin: str = "2 3\n", timeout: float = 5.0):
    _need(lang)
    prog = compile_program(lang, src, pool=pool, timeout=120)
    assert prog.ok, prog.info
    return run_program(prog, stdin, timeout=timeout, pool=pool)


# ------------------------------------------------------------------------------ host-side helpers
def _sysvipc(kind: str, pid: int | None = None) -> list[list[str]]:
    """Rows of /proc/sysvipc/<kind> in the IPC namespace of ``pid`` (the host's when None)."""
    cmd = ["cat", f"/proc/sysvipc/{kind}"]
    if pid is not None:
        cmd = ["nsenter", "-t", str(pid), "-i", *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout
    return [ln.split() for ln in out.splitlines()[1:] if ln.strip()]


def _host_ipc_ids() -> dict[str, set[str]]:
    return {k: {r[1] for r in _sysvipc(k)} for k in ("shm", "msg", "sem")}


def _remove_host_ipc(before: dict[str, set[str]]) -> None:
    """Remove the host's SysV objects the sandbox uid created during a test (tier B before the fix)."""
    b = isolation.detect_tier("B") if tier_available("B") else None
    uid = str(b.drop_to[0]) if b is not None and b.drop_to else None
    flag = {"shm": "-m", "msg": "-q", "sem": "-s"}
    for kind in ("shm", "msg", "sem"):
        for r in _sysvipc(kind):
            mine = int(r[0]) & 0xFFFFFFF0 == KEY & 0xFFFFFFF0 if r[0].lstrip("-").isdigit() else False
            if r[1] not in before[kind] and (mine or (uid is not None and uid in r)):
                subprocess.run(["ipcrm", flag[kind], r[1]], capture_output=True, timeout=10)


def _servers(pool: SandboxPool) -> list[int]:
    """PIDs (host view) of the pool's fork servers (the idle ones: no job runs)."""
    found = []
    for s in list(pool._idle):
        for p in [s.proc.pid, *descendants(s.proc.pid)]:
            try:
                with open(f"/proc/{p}/cmdline", "rb") as fh:
                    argv = fh.read().split(b"\0")
            except OSError:
                continue
            if any(a.endswith(b"server.py") for a in argv) and not any(a.endswith(b"bwrap") for a in argv) \
                    and not any(a.endswith((b"launch.py", b"reaper.py")) for a in argv):
                found.append(p)
    return found


def _state(pid: int) -> dict:
    """What a job must not change about a server: rlimits, nice, policy, CPU affinity."""
    with open(f"/proc/{pid}/limits") as fh:
        limits = [ln for ln in fh.read().splitlines()
                  if ln.startswith(("Max address space", "Max open files", "Max file size", "Max stack size",
                                    "Max processes", "Max cpu time"))]
    with open(f"/proc/{pid}/stat") as fh:
        f = fh.read().rsplit(")", 1)[1].split()
    with open(f"/proc/{pid}/status") as fh:
        cpus = [ln for ln in fh.read().splitlines() if ln.startswith("Cpus_allowed_list")]
    return {"limits": limits, "nice": f[16], "policy": f[38], "cpus": cpus}


# ------------------------------------------------------------------------------ SysV IPC between jobs
STORE_AND_REPLAY = {  # name -> (language, job 1: solves and stores, job 2: replays only)
    "c_shm": ("c",
              "#include <stdio.h>\n#include <sys/ipc.h>\n#include <sys/shm.h>\nint main(void){int a,b;scanf(\"%d %d\","
              "&a,&b);int id=shmget(0x5EED0041,4096,IPC_CREAT|0666);if(id>=0){char*p=shmat(id,0,0);if(p!=(void*)-1)"
              "{sprintf(p,\"%d\",a+b);shmdt(p);}}printf(\"%d\\n\",a+b);return 0;}\n",
              "#include <stdio.h>\n#include <sys/ipc.h>\n#include <sys/shm.h>\nint main(void){int id=shmget(0x5EED0041,"
              "4096,0);if(id>=0){char*p=shmat(id,0,SHM_RDONLY);if(p!=(void*)-1){puts(p);return 0;}}puts(\"0\");"
              "return 0;}\n"),
    "c_msg": ("c",
              "#include <stdio.h>\n#include <string.h>\n#include <sys/ipc.h>\n#include <sys/msg.h>\n"
              "struct m{long t;char s[16];};"
              "int main(void){int a,b;scanf(\"%d %d\",&a,&b);struct m x={1};sprintf(x.s,\"%d\",a+b);int q="
              "msgget(0x5EED0042,IPC_CREAT|0666);if(q>=0)msgsnd(q,&x,sizeof x.s,IPC_NOWAIT);printf(\"%d\\n\",a+b);"
              "return 0;}\n",
              "#include <stdio.h>\n#include <sys/ipc.h>\n#include <sys/msg.h>\nstruct m{long t;char s[16];};int main("
              "void){struct m x;int q=msgget(0x5EED0042,0);if(q>=0&&msgrcv(q,&x,sizeof x.s,0,IPC_NOWAIT)>0){puts(x.s);"
              "return 0;}puts(\"0\");return 0;}\n"),
    "c_sem": ("c",
              "#include <stdio.h>\n#include <sys/ipc.h>\n#include <sys/sem.h>\nint main(void){int a,b;scanf(\"%d %d\","
              "&a,&b);int s=semget(0x5EED0043,1,IPC_CREAT|0666);if(s>=0)semctl(s,0,SETVAL,a+b);printf(\"%d\\n\",a+b);"
              "return 0;}\n",
              "#include <stdio.h>\n#include <sys/ipc.h>\n#include <sys/sem.h>\nint main(void){int s="
              "semget(0x5EED0043,1,0);printf(\"%d\\n\",s>=0?semctl(s,0,GETVAL):0);return 0;}\n"),
    "python_shm": ("python",
                   "import ctypes\nlibc=ctypes.CDLL(None)\nlibc.shmat.restype=ctypes.c_void_p\na,b=map(int,input()."
                   "split())\ni=libc.shmget(0x5EED0044,4096,0o1666)\nif i>=0:\n    p=libc.shmat(i,None,0)\n    if p "
                   "and p!=ctypes.c_void_p(-1).value:\n        ctypes.memmove(p,str(a+b).encode()+b'\\0',8)\n"
                   "print(a+b)\n",
                   "import ctypes\nlibc=ctypes.CDLL(None)\nlibc.shmat.restype=ctypes.c_void_p\n"
                   "i=libc.shmget(0x5EED0044,4096,0)\n"
                   "p=libc.shmat(i,None,0) if i>=0 else None\nprint(ctypes.string_at(p).decode() if p and p!="
                   "ctypes.c_void_p(-1).value else 0)\n"),
    "go_shm": ("go",
               "package main\nimport (\"fmt\";\"syscall\";\"unsafe\")\nfunc main(){var a,b int;fmt.Scan(&a,&b);"
               "id,_,e:=syscall.Syscall(syscall.SYS_SHMGET,0x5EED0046,4096,01666);if e==0{p,_,e2:=syscall.Syscall("
               "syscall.SYS_SHMAT,id,0,0);if e2==0{s:=fmt.Sprint(a+b);d:=(*[8]byte)(unsafe.Pointer(p));copy(d[:],s)}};"
               "fmt.Println(a+b)}\n",
               "package main\nimport (\"fmt\";\"syscall\";\"unsafe\")\nfunc main(){id,_,e:=syscall.Syscall("
               "syscall.SYS_SHMGET,0x5EED0046,4096,0);if e==0{p,_,e2:=syscall.Syscall(syscall.SYS_SHMAT,id,0,010000);"
               "if e2==0{d:=(*[8]byte)(unsafe.Pointer(p));n:=0;for n<8&&d[n]!=0{n++};fmt.Println(str"
               "ing(d[:n]));return}};"
               "fmt.Println(0)}\n"),
    "rust_shm": ("rust",
                 "extern \"C\" {fn shmget(k:i32,s:usize,f:i32)->i32; fn shmat(i:i32,a:*const u8,f:i32)->*mut u8;}\n"
                 "fn main(){let mut s=String::new();std::io::stdin().read_line(&mut s).unwrap();let v:Vec<i64>=s."
                 "split_whitespace().map(|x|x.parse().unwrap()).collect();let ans=(v[0]+v[1]).to_str"
                 "ing();unsafe{let id="
                 "shmget(0x5EED0047,4096,0o1666);if id>=0{let p=shmat(id,std::ptr::null(),0);if p as"
                 " isize!=-1{for (i,c) "
                 "in ans.bytes().enumerate(){*p.add(i)=c;}}}}println!(\"{}\",ans);}\n",
                 "extern \"C\" {fn shmget(k:i32,s:usize,f:i32)->i32; fn shmat(i:i32,a:*const u8,f:i32)->*mut u8;}\n"
                 "fn main(){unsafe{let id=shmget(0x5EED0047,4096,0);if id>=0{let p=shmat(id,std::ptr::null(),0o10000);"
                 "if p as isize!=-1{let mut n=0;while n<8&&*p.add(n)!=0{n+=1;}println!(\"{}\",String::from_utf8_lossy("
                 "std::slice::from_raw_parts(p,n)));return;}}}println!(\"0\");}\n"),
    # bash: ipcmk makes a segment whose size is the answer; the replay reads it back with ipcs
    "bash_ipcmk": ("bash",
                   "read a b\nipcmk -M $((a+b)) >/dev/null 2>&1\necho $((a+b))\n",
                   "s=0\nwhile read k i o p n r; do [[ $n =~ ^[0-9]+$ ]] && ((n < 100)) && s=$n; done "
                   "< <(ipcs -m 2>/dev/null)\n"
                   "echo $s\n"),
}


@pytest.mark.parametrize("name", sorted(STORE_AND_REPLAY))
def test_sysv_ipc_does_not_carry_answers_to_the_next_job(name, one_server):
    lang, store, replay = STORE_AND_REPLAY[name]
    r1 = _run(one_server, lang, store)
    assert (r1.status, r1.stdout.strip()) == ("ran", "5"), r1  # job 1 is a correct solution
    r2 = _run(one_server, lang, replay)
    assert r2.stdout.strip() != "5", f"{name}: job 2 replayed job 1's answer through SysV IPC ({r2})"


def test_sysv_ipc_inside_one_job(one_server):
    """Control: within one job, SysV shared memory works in tier A (the job's own IPC namespace)
    and is refused (EPERM) in tier B, where the job would share the host's."""
    src = ("#include <stdio.h>\n#include <errno.h>\n#include <string.h>\n#include <sys/ipc.h>\n#include <sys/shm.h>\n"
           "int main(void){int id=shmget(IPC_PRIVATE,4096,IPC_CREAT|0600);if(id<0){puts(strerror(errno));return 0;}"
           "char*p=shmat(id,0,0);strcpy(p,\"5\");puts(p);shmdt(p);shmctl(id,IPC_RMID,0);return 0;}\n")
    r = _run(one_server, "c", src)
    want = "5" if one_server.tier.name == "A" else "Operation not permitted"
    assert (r.status, r.stdout.strip()) == ("ran", want), r


def test_shared_memory_does_not_stay_resident_after_the_job(one_server):
    """A job creates, touches and detaches a 32 MiB segment, then ends: nothing of it remains in
    the server's IPC namespace (tier A) or the host's (tier B)."""
    src = ("#include <stdio.h>\n#include <string.h>\n#include <sys/ipc.h>\n#include <sys/shm.h>\nint main(void){int id="
           f"shmget(0x5EED0045,{SEG_MB}<<20,IPC_CREAT|0666);if(id>=0){{char*p=shmat(id,0,0);if(p!=(void*)-1)"
           f"{{memset(p,1,{SEG_MB}<<20);shmdt(p);}}}}puts(\"5\");return 0;}}\n")
    r = _run(one_server, "c", src)
    assert r.status == "ran", r
    size = str(SEG_MB << 20)
    for pid in [None, *_servers(one_server)]:
        left = [row for row in _sysvipc("shm", pid) if row[3] == size]
        assert not left, f"a {SEG_MB} MiB segment outlived its job (namespace of pid {pid}): {left}"


# ------------------------------------------------------------------------------ limits outside the job
DEGRADE = {  # lower the checker's (parent's) and the fork server's limits and scheduling; the
    # server's pid (as the job sees it) comes on stdin: a job cannot read /proc/<ppid>, a real attack scans
    "python": "import os,resource\na,b,s=map(int,input().split())\nR=resource\nfor t in (os.getppid(),s):\n"
              "    for f in (lambda:R.prlimit(t,R.RLIMIT_AS,(1<<26,1<<26)),lambda:R.prlimit(t,R.RLIMIT_NOFILE,(16,16)),"
              "lambda:R.prlimit(t,R.RLIMIT_FSIZE,(1024,1024)),lambda:R.prlimit(t,R.RLIMIT_STACK,(1<<16,1<<16)),"
              "lambda:os.setpriority(os.PRIO_PROCESS,t,19),lambda:os.sched_setaffinity(t,{0}),"
              "lambda:os.sched_setscheduler(t,os.SCHED_IDLE,os.sched_param(0))):\n"
              "        try:\n            f()\n        except OSError:\n            pass\nprint(a+b)\n",
    "c": "#define _GNU_SOURCE\n#include <stdio.h>\n#include <sched.h>\n#include <unistd.h>\n#include <sys/resource.h>\n"
         "int main(void){int a,b,s;scanf(\"%d %d %d\",&a,&b,&s);int t[2]={getppid(),s};struct rlimit as={1<<26,1<<26},"
         "nf={16,16},fs={1024,1024},st={1<<16,1<<16};cpu_set_t one;CPU_ZERO(&one);CPU_SET(0,&one);struct sched_param "
         "sp={0};for(int i=0;i<2;i++){prlimit(t[i],RLIMIT_AS,&as,0);prlimit(t[i],RLIMIT_NOFILE,&nf,0);"
         "prlimit(t[i],RLIMIT_FSIZE,&fs,0);prlimit(t[i],RLIMIT_STACK,&st,0);setpriority(PRIO_PROCESS,t[i],19);"
         "sched_setaffinity(t[i],sizeof one,&one);sched_setscheduler(t[i],SCHED_IDLE,&sp);}printf(\"%d\\n\",a+b);"
         "return 0;}\n",
    "bash": "read a b s\nfor t in $PPID $s; do prlimit --pid $t --as=67108864 --nofile=16 --fsize=1024 --stack=65536 "
            "2>/dev/null; renice -n 19 -p $t >/dev/null 2>&1; taskset -p 1 $t >/dev/null 2>&1; chrt -i -p 0 $t "
            ">/dev/null 2>&1; done\necho $((a+b))\n",
    "javascript": "const os=require('os');const [a,b,s]=require('fs').readFileSync(0,'utf8').trim().split(/\\s+/)"
                  ".map(Number);for(const t of [process.ppid,s]){try{os.setPriority(t,19)}catch(e){}"
                  "}console.log(a+b)\n",
    "go": "package main\nimport (\"fmt\";\"syscall\";\"unsafe\")\nfunc main(){var a,b,s int;fmt.Scan"
    "(&a,&b,&s);for _,t:="
          "range []int{syscall.Getppid(),s}{syscall.Setpriority(syscall.PRIO_PROCESS,t,19);as:=[2]uint64{1<<26,1<<26};"
          "nf:=[2]uint64{16,16};syscall.RawSyscall6(syscall.SYS_PRLIMIT64,uintptr(t),9,uintptr(unsaf"
          "e.Pointer(&as)),0,0,"
          "0);syscall.RawSyscall6(syscall.SYS_PRLIMIT64,uintptr(t),7,uintptr(unsafe.Pointer(&nf)),0,"
          "0,0);var m [16]uint64"
          ";m[0]=1;syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY,uintptr(t),128,uintptr(unsafe.Pointer(&m)));p:=[1]"
          "int32{0};syscall.RawSyscall(syscall.SYS_SCHED_SETSCHEDULER,uintptr(t),5,uintptr(unsafe.Pointer(&p)))};"
          "fmt.Println(a+b)}\n",
    "rust": "#[repr(C)] struct Rl{c:u64,m:u64}\nextern \"C\" {fn prlimit(p:i32,r:i32,n:*const Rl,o:*mut Rl)->i32; fn "
            "setpriority(w:i32,who:u32,p:i32)->i32; fn getppid()->i32; fn sched_setaffinity(p:i32,n:usize,m:*const u64)"
            "->i32; fn sched_setscheduler(p:i32,pol:i32,sp:*const i32)->i32;}\nfn main(){let mut s=String::new();"
            "std::io::stdin().read_line(&mut s).unwrap();let v:Vec<i64>=s.split_whitespace().map(|x|x.parse().unwrap())"
            ".collect();unsafe{for t in [getppid(),v[2] as i32]{prlimit(t,9,&Rl{c:1<<26,m:1<<26},std::ptr::null_mut());"
            "prlimit(t,7,&Rl{c:16,m:16},std::ptr::null_mut());setpriority(0,t as u32,19);let mut m=[0u64;16];m[0]=1;"
            "sched_setaffinity(t,128,m.as_ptr());sched_setscheduler(t,5,&0i32);}}println!(\"{}\",v[0]+v[1]);}\n",
}
CORRECT = {"python": "a,b=map(int,input().split())\nprint(a+b)\n",
           "c": "#include <stdio.h>\nint main(void){int a,b;scanf(\"%d %d\",&a,&b);printf(\"%d\\n\",a+b);return 0;}\n",
           "bash": "read a b\necho $((a+b))\n",
           "javascript": "const [a,b]=require('fs').readFileSync(0,'utf8').trim().split(/\\s+/).map(Number);"
                         "console.log(a+b)\n",
           "go": "package main\nimport \"fmt\"\nfunc main(){var a,b int;fmt.Scan(&a,&b);fmt.Println(a+b)}\n",
           "rust": "fn main(){let mut s=String::new();std::io::stdin().read_line(&mut s).unwrap();let v:Vec<i64>=s."
                   "split_whitespace().map(|x|x.parse().unwrap()).collect();println!(\"{}\",v[0]+v[1]);}\n"}


@pytest.fixture(params=[*TIERS, pytest.param("unsafe", id="unsafe")])
def one_server_any(request):
    """As ``one_server``, plus the unsafe tier (no seccomp: the server's own check after each job)."""
    pool = SandboxPool(1, tier=request.param)
    yield pool
    pool.close()


@pytest.mark.parametrize("lang", sorted(DEGRADE))
def test_a_job_cannot_lower_its_servers_limits_or_scheduling(lang, one_server_any):
    one_server = one_server_any
    _run(one_server, lang, CORRECT[lang])  # the server is up, its compile cache warm
    (pid,) = _servers(one_server)
    before = _state(pid)
    with open(f"/proc/{pid}/status") as fh:
        inner = [ln.split()[-1] for ln in fh if ln.startswith("NSpid:")][0]  # its pid in the job's namespace
    r = _run(one_server, lang, DEGRADE[lang], stdin=f"2 3 {inner}\n")
    assert (r.status, r.stdout) == ("ran", "5\n"), r
    for p in _servers(one_server):  # the same server, or its replacement: as a fresh one starts
        assert _state(p) == before, f"{lang}: the job changed its fork server {p}"
    for check_lang in ("python", "c", "bash"):
        if AVAIL[check_lang] is None:
            r = _run(one_server, check_lang, CORRECT[check_lang])
            assert (r.status, r.stdout) == ("ran", "5\n"), (lang, check_lang, r)


# ------------------------------------------------------------------------------ the filter itself
FILTER_PROBE = r"""
import ctypes, errno, os, resource, sys
sys.path.insert(0, sys.argv[1])
import confine
deny_ipc = sys.argv[2] == "1"
parent = os.getppid()
confine.apply_seccomp(deny_ipc=deny_ipc)
libc = ctypes.CDLL(None, use_errno=True)

def outcome(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]

def shm():
    i = libc.shmget(0, 4096, 0o1600)  # IPC_PRIVATE
    if i < 0:
        raise OSError(ctypes.get_errno(), "shmget")
    libc.shmctl(i, 0, None)  # IPC_RMID

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
print({
    "own_setrlimit": outcome(lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))),
    "own_prlimit_0": outcome(lambda: resource.prlimit(0, resource.RLIMIT_NOFILE, (soft, hard))),
    "read_parent_limit": outcome(lambda: resource.prlimit(parent, resource.RLIMIT_NOFILE)),
    "set_parent_limit": outcome(lambda: resource.prlimit(parent, resource.RLIMIT_NOFILE, (soft, hard))),
    "own_nice": outcome(lambda: os.setpriority(os.PRIO_PROCESS, 0, 1)),
    "parent_nice": outcome(lambda: os.setpriority(os.PRIO_PROCESS, parent, 19)),
    "user_nice": outcome(lambda: os.setpriority(os.PRIO_USER, 0, 19)),
    "pgrp_nice": outcome(lambda: os.setpriority(os.PRIO_PGRP, 0, 19)),
    "own_affinity": outcome(lambda: os.sched_setaffinity(0, os.sched_getaffinity(0))),
    "parent_affinity": outcome(lambda: os.sched_setaffinity(parent, {0})),
    "parent_scheduler": outcome(lambda: os.sched_setscheduler(parent, os.SCHED_IDLE, os.sched_param(0))),
    "parent_param": outcome(lambda: os.sched_setparam(parent, os.sched_param(0))),
    "sysv_shm": outcome(shm),
})
"""


@pytest.mark.parametrize("deny_ipc", [False, True])
def test_seccomp_filter_allows_the_job_itself_only(deny_ipc, tmp_path):
    """The filter's argument checks, directly: the process may set its own limits and scheduling
    (pid 0), read but not set its parent's limits, and not touch the parent's nice, affinity or
    policy; SysV IPC works or is EPERM as asked."""
    import ast
    import sys

    confine = isolation.load_runtime_module("confine")
    if confine.seccomp_arch() is None:
        pytest.skip("no seccomp filter for this architecture")
    runtime = isolation.runtime_dir()
    probe = [sys.executable, "-I", "-S", "-c", FILTER_PROBE, runtime, "1" if deny_ipc else "0"]
    # the probe's parent is a throwaway interpreter, not this test process
    relay = [sys.executable, "-I", "-S", "-c", "import subprocess,sys; sys.exit(subprocess.call(sys.argv[1:]))"]
    r = subprocess.run([*relay, *probe], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = ast.literal_eval(r.stdout.strip())
    want = {"own_setrlimit": "ok", "own_prlimit_0": "ok", "read_parent_limit": "ok", "set_parent_limit": "EPERM",
            "own_nice": "ok", "parent_nice": "EPERM", "user_nice": "EPERM", "pgrp_nice": "EPERM",
            "own_affinity": "ok", "parent_affinity": "EPERM", "parent_scheduler": "EPERM", "parent_param": "EPERM",
            "sysv_shm": "EPERM" if deny_ipc else "ok"}
    assert got == want


# ------------------------------------------------------------------------------ files between jobs
# job 1 solves "2 3", stores the answer in keep/inner/secret and hides it (chmod 000 keep); job 2
# lists the scratch root (its cwd's parent), restores the permissions and replays what it finds
HIDE_AND_FIND = {
    "python": ("import os\na,b=map(int,input().split())\nos.makedirs('keep/inner')\n"
               "open('keep/inner/secret','w').write(str(a+b))\nos.chmod('keep/inner',0o500)\nos.chmod('keep',0)\n"
               "print(a+b)\n",
               "import os\nroot=os.path.dirname(os.getcwd())\nout='0'\nfor d in os.listdir(root):\n"
               "    p=os.path.join(root,d,'keep')\n    try:\n        os.chmod(p,0o700)\n"
               "        os.chmod(p+'/inner',0o700)\n        out=open(p+'/inner/secret').read()\n"
               "    except OSError:\n        pass\nprint(out)\n"),
    "bash": ("read a b\nmkdir -p keep/inner\necho $((a+b)) > keep/inner/secret\nchmod 500 keep/inner\nchmod 000 keep\n"
             "echo $((a+b))\n",
             "out=0\nfor p in \"$(dirname \"$PWD\")\"/*/keep; do\n  chmod 700 \"$p\" 2>/dev/null && "
             "chmod 700 \"$p/inner\" 2>/dev/null && out=$(cat \"$p/inner/secret\")\ndone\necho $out\n"),
    "c": ("#include <stdio.h>\n#include <sys/stat.h>\nint main(void){int a,b;scanf(\"%d %d\",&a,&b);"
          "mkdir(\"keep\",0700);mkdir(\"keep/inner\",0700);FILE*f=fopen(\"keep/inner/secret\",\"w\");"
          "fprintf(f,\"%d\",a+b);fclose(f);chmod(\"keep/inner\",0500);chmod(\"keep\",0);printf(\"%d\\n\",a+b);"
          "return 0;}\n",
          "#include <stdio.h>\n#include <string.h>\n#include <libgen.h>\n#include <dirent.h>\n#include <unistd.h>\n"
          "#include <sys/stat.h>\nint main(void){char cwd[4096],p[8192],out[64]=\"0\";getcwd(cwd,sizeof cwd);"
          "char*root=dirname(cwd);DIR*d=opendir(root);struct dirent*e;while(d&&(e=readdir(d))){"
          "snprintf(p,sizeof p,\"%s/%s/keep\",root,e->d_name);if(chmod(p,0700))continue;strcat(p,\"/inner\");"
          "chmod(p,0700);strcat(p,\"/secret\");FILE*f=fopen(p,\"r\");if(f){if(!fgets(out,sizeof out,f))"
          "strcpy(out,\"0\");fclose(f);}}puts(out);return 0;}\n"),
}


@pytest.mark.parametrize("lang", sorted(HIDE_AND_FIND))
def test_hidden_files_do_not_carry_answers_to_the_next_job(lang, one_server):
    hide, find = HIDE_AND_FIND[lang]
    r1 = _run(one_server, lang, hide)
    assert (r1.status, r1.stdout.strip()) == ("ran", "5"), r1
    r2 = _run(one_server, lang, find)
    assert r2.stdout.strip() != "5", f"{lang}: job 2 read job 1's chmod-000 files ({r2})"
    r3 = _run(one_server, lang, CORRECT[lang])
    assert (r3.status, r3.stdout.strip()) == ("ran", "5"), r3


DEEP = ("import os\na,b=map(int,input().split())\nfor i in range(3000):\n    os.mkdir('d')\n    os.chdir('d')\n"
        "open('secret','w').write(str(a+b))\nprint(a+b)\n")
FIND_DEEP = ("import os\nroot=os.path.dirname(os.getcwd())\nout='0'\ntry:\n    names=os.listdir(root)\n"
             "except OSError:\n    names=[]\nfor n in names:\n"
             "    p=os.path.join(root,n)\n    if p==os.getcwd() or not os.path.isdir(os.path.join(p,'d')):\n"
             "        continue\n    os.chdir(p)\n    while os.path.isdir('d'):\n        os.chdir('d')\n"
             "    if os.path.exists('secret'):\n        out=open('secret').read()\nprint(out)\n")


def test_a_deep_tree_is_removed_and_raises_nowhere(one_server):
    """3,000 nested dirs (past Python's recursion limit and PATH_MAX): the job itself is fine,
    the next job finds nothing, and neither the server nor the caller sees an exception."""
    r1 = _run(one_server, "python", DEEP)
    assert (r1.status, r1.stdout.strip()) == ("ran", "5"), r1
    r2 = _run(one_server, "python", FIND_DEEP)
    assert (r2.status, r2.stdout.strip()) == ("ran", "0"), r2
    scratch = [s.scratch for s in one_server._idle]
    one_server.close()  # the parent's own removal (tier B: the host's /tmp) must not raise either
    if one_server.tier.name == "B":
        assert not any(os.path.lexists(s) for s in scratch), scratch


# ------------------------------------------------------------------------------ the compile cache
FILL_AND_HIDE = ("import os\nos.mkdir('keep')\nfor i in range(12):\n    try:\n"
                 "        with open(f'keep/f{i}','wb') as f:\n            f.write(b'x'*(30<<20))\n"
                 "    except OSError:\n        break\nos.chmod('keep',0)\nprint(5)\n")


def test_a_full_scratch_does_not_fail_the_next_compile(one_server):
    """Job 1 fills the scratch (the 256 MiB tmpfs of tier A) and hides its files; the next job,
    a correct C source never compiled before, compiles and runs."""
    _need("c")
    one_server.execute(FILL_AND_HIDE, stdin="", expected_stdout="5\n", timeout=20)
    src = CORRECT["c"] + f"/* {os.getpid()} {id(one_server)} */\n"  # a fresh cache key
    r = _run(one_server, "c", src)
    assert (r.status, r.stdout) == ("ran", "5\n"), r


@pytest.mark.parametrize("message", [
    "gcc: fatal error: cannot execute 'cc1': vfork: Resource temporarily unavailable",
    "/usr/bin/ld: final link failed: No space left on device",
    "cc1: out of memory allocating 65536 bytes\nCannot allocate memory",
    "gcc: fatal error: Killed signal terminated program cc1",
])
def test_a_compile_error_of_exhausted_resources_is_not_cached(message):
    """F2/F3 of the red-team: a compile that failed because an earlier (or concurrent) job filled
    the disk or the process table is not remembered as the source's compile error."""
    from rewardlab.sandbox.languages import CompileCache, Program

    cache, calls = CompileCache(), []

    def make(text):
        calls.append(text)
        return Program("c", False, "compile_error", source="x", info={"compile_status": "error", "error": text})

    cache.get_or_compile(("c", (), "k"), lambda: make(message))
    again = cache.get_or_compile(("c", (), "k"), lambda: make("the compiler's own error"))
    assert (again.cached, len(calls)) == (False, 2), again
    third = cache.get_or_compile(("c", (), "k"), lambda: make("x.c:1:1: error: expected ';'"))
    assert third.cached, "the compiler's own deterministic error is remembered"
    own = "x.c:3:5: error: implicit declaration of function 'signal'; x.c:4:1: error: 'killed' undeclared"
    cache.get_or_compile(("c", (), "s"), lambda: make(own))
    assert cache.get_or_compile(("c", (), "s"), lambda: make("other")).cached, "a source naming signal/killed"


def test_a_job_cannot_list_or_enter_the_scratch_root(one_server):
    """Landlock per job: only the job's own dir is writable (and readable) under the scratch root,
    so the dirs of other jobs could not even be listed were any left."""
    src = ("import os\nroot=os.path.dirname(os.getcwd())\nout=[]\nfor f in (lambda: os.listdir(root),"
           " lambda: os.mkdir(os.path.join(root,'x'))):\n    try:\n        f()\n        out.append('allowed')\n"
           "    except OSError:\n        out.append('denied')\nprint(*out)\n")
    r = one_server.execute(src, stdin="", expected_stdout="denied denied\n", timeout=10)
    assert r.passed, r
