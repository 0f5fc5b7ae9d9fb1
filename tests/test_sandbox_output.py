"""What a job's own output can do to its verdict (issue 41, the smaller items), tier A and tier B.

    PYTHONPATH=. .venv/bin/python -m pytest -q tests/test_sandbox_output.py

* A wrong answer must not turn its own 0 into an ungraded ``sandbox_error`` through what it
  writes: files over the disk cap hidden at the bottom of a 2,000-deep tree made the checker's
  disk accounting raise ``RecursionError`` (Python 3.11's ``os.walk`` recurses), the checker died
  without a verdict and the run was ``sandbox_error`` (score None). The job's own output is the
  job's fault: a verdict against it (``output_limit``), never ``sandbox_error``.
* Files the checker cannot read (a directory the job made ``chmod 000``) are not "no files": the
  disk accounting used to skip them, so 30 MiB under a 16 MiB cap passed. Now a measurement that
  cannot see everything counts as over the cap.
* NUL and other control bytes: a stdout holding a C0 control byte (other than tab, line feed,
  vertical tab, form feed, carriage return) or DEL that the expected answer does not hold is a
  wrong answer before any comparison or task checker sees it. A C checker that reads the output
  with ``fgets`` / ``strlen`` sees ``"\\0\\n"`` as an empty line: with a prefix comparison (a
  checker bug we cannot fix, but no longer pass such output to) it accepted it.
"""

from __future__ import annotations

import pytest

from rewardlab.rewards import code_suite
from rewardlab.rewards.code_suite import checker_program, run_suite
from rewardlab.sandbox import SandboxPool
from rewardlab.sandbox.languages import available, compile_program, run_program
from rewardlab.sandbox.parent import Limits
from sandbox_tiers import TIERS, tier_available

AVAIL = available()





@pytest.fixture(params=TIERS, scope="module")
def pool(request):
    p = SandboxPool(1, tier=request.param, limits=Limits(disk_mb=16))
    yield p
    p.close()


def _prog(pool, lang: str, src: str):
    if AVAIL[lang] is not None:
        pytest.skip(f"{lang} unavailable here: {AVAIL[lang]}")
    prog = compile_program(lang, src, pool=pool, timeout=120)
    assert prog.ok, prog.info
    return prog


# ------------------------------------------------------------------------------ own output -> sandbox_error
DEEP_AND_BIG = {  # a wrong answer (4 for "2 3") that writes 30 MiB (disk cap 16 MiB) under a 2,000-deep tree
    "python": "import os,time\nfor i in range(2000):\n    os.mkdir('d')\n    os.chdir('d')\n"
              "open('big','wb').write(b'x'*(30<<20))\nprint(4)\ntime.sleep(1)\n",
    "bash": "p=$(printf 'd/%.0s' $(seq 2000))\nmkdir -p \"$p\" && cd \"$p\" || exit 1\n"
            "head -c 31457280 /dev/zero > big\necho 4\nsleep 1\n",
    "c": "#include <stdio.h>\n#include <string.h>\n#include <unistd.h>\n#include <sys/stat.h>\nint main(void){"
         "for(int i=0;i<2000;i++){mkdir(\"d\",0700);if(chdir(\"d\"))return 1;}FILE*f=fopen(\"big\",\"wb\");"
         "static char b[1<<20];memset(b,'x',sizeof b);for(int i=0;i<30;i++)fwrite(b,1,sizeof b,f);fclose(f);"
         "puts(\"4\");fflush(stdout);sleep(1);return 0;}\n",
}


@pytest.mark.parametrize("lang", sorted(DEEP_AND_BIG))
def test_the_jobs_own_files_are_never_a_sandbox_error(lang, pool):
    prog = _prog(pool, lang, DEEP_AND_BIG[lang])
    r = run_program(prog, "2 3\n", timeout=20, pool=pool)
    assert r.status == "output_limit", (lang, r.status, r.error)
    assert "disk cap" in (r.error or "")
    ok = run_program(_prog(pool, "python", "a,b=map(int,input().split())\nprint(a+b)\n"), "2 3\n", pool=pool)
    assert (ok.status, ok.stdout) == ("ran", "5\n")  # the next job on the server is fine


HIDDEN_BIG = {  # a right answer that leaves 30 MiB (disk cap 16 MiB) in a directory it then makes unreadable
    "python": "import os,time\na,b=map(int,input().split())\nos.mkdir('h')\nopen('h/big','wb').write(b'x'*(30<<20))\n"
              "os.chmod('h',0)\nprint(a+b)\ntime.sleep(1)\n",
    "bash": "read a b\nmkdir h\nhead -c 31457280 /dev/zero > h/big\nchmod 000 h\necho $((a+b))\nsleep 1\n",
    "c": "#include <stdio.h>\n#include <string.h>\n#include <unistd.h>\n#include <sys/stat.h>\nint main(void){"
         "int a,b;scanf(\"%d %d\",&a,&b);mkdir(\"h\",0700);FILE*f=fopen(\"h/big\",\"wb\");static char x[1<<20];"
         "memset(x,'x',sizeof x);for(int i=0;i<30;i++)fwrite(x,1,sizeof x,f);fclose(f);chmod(\"h\",0);"
         "printf(\"%d\\n\",a+b);fflush(stdout);sleep(1);return 0;}\n",
}


@pytest.mark.parametrize("lang", sorted(HIDDEN_BIG))
def test_files_hidden_from_the_disk_accounting_count_as_over_the_cap(lang, pool):
    r = run_program(_prog(pool, lang, HIDDEN_BIG[lang]), "2 3\n", timeout=20, pool=pool)
    assert r.status == "output_limit", (lang, r.status, r.stdout, r.error)


def test_the_jobs_own_files_score_0_with_the_reason(pool):
    res = run_suite(_prog(pool, "python", DEEP_AND_BIG["python"]), [{"stdin": "2 3\n", "stdout": "5\n"}],
                    time_limit=20, pool=pool)
    assert res.status == "output_limit" and res.passed == 0, res
    assert "disk cap" in res.first_failure["reason"]


# ------------------------------------------------------------------------------ NUL and control bytes
# The task's checker (testlib order: input output answer) compares a prefix of the answer as long as
# the output's first line: a checker bug. "\0\n" is an empty C string to it.
PREFIX_CHECKER = ("#include <stdio.h>\n#include <string.h>\nint main(int c,char**v){FILE*o=fopen(v[2],\"r\"),"
                  "*a=fopen(v[3],\"r\");char x[256]={0},y[256]={0};if(!o||!a||!fgets(x,256,o))return 1;"
                  "if(!fgets(y,256,a))return 1;return strncmp(x,y,strlen(x))?1:0;}\n")
NUL_LINE = {  # prints "\0\n": knows nothing of the answer
    "python": "import sys\nsys.stdout.write('\\0\\n')\n",
    "c": "#include <stdio.h>\nint main(void){putchar(0);putchar(10);return 0;}\n",
    "cpp": "#include <cstdio>\nint main(){std::putchar(0);std::putchar(10);}\n",
    "bash": "printf '\\0\\n'\n",
    "go": "package main\nimport \"os\"\nfunc main(){os.Stdout.Write([]byte{0,10})}\n",
    "rust": "use std::io::Write;\nfn main(){std::io::stdout().write_all(&[0u8,10]).unwrap();}\n",
    "javascript": "process.stdout.write('\\0\\n')\n",
    "java": "public class Main{public static void main(String[] a){System.out.print(\"\\0\\n\");}}\n",
}
CASES = [{"stdin": "2 3\n", "stdout": "5\n"}]


@pytest.fixture(scope="module")
def prefix_checker(pool):
    if AVAIL["c"] is not None:
        pytest.skip(f"c unavailable here: {AVAIL['c']}")
    return checker_program({"language": "c", "code": PREFIX_CHECKER}, pool=pool)


@pytest.mark.parametrize("lang", sorted(NUL_LINE))
def test_a_nul_byte_never_reaches_the_tasks_checker(lang, pool, prefix_checker):
    res = run_suite(_prog(pool, lang, NUL_LINE[lang]), CASES, compare="checker", checker=prefix_checker, pool=pool)
    assert (res.status, res.passed) == ("fail", 0), (lang, res)
    assert "control byte 0x00" in res.first_failure["reason"]


def test_the_prefix_checker_itself_rejects_a_plain_wrong_answer_and_accepts_a_right_one(pool, prefix_checker):
    wrong = run_suite(_prog(pool, "python", "print(4)\n"), CASES, compare="checker", checker=prefix_checker, pool=pool)
    right = run_suite(_prog(pool, "python", "print(5)\n"), CASES, compare="checker", checker=prefix_checker, pool=pool)
    assert (wrong.status, right.status) == ("fail", "pass")


@pytest.mark.parametrize("out, expected, bad", [
    ("5\x00\n", "5\n", "0x00"),        # NUL after the answer
    ("5\n\x1b[2J", "5\n", "0x1b"),     # an escape sequence
    ("5\x7f\n", "5\n", "0x7f"),        # DEL
    ("5\x1f\n", "5\n", "0x1f"),        # str.split() treats 0x1c-0x1f as whitespace: still refused
    ("5\t\r\n\x0b\x0c", "5\n", None),  # tab, CR, LF, VT, FF: ordinary whitespace, the comparison decides
    ("a\x01b\n", "a\x01b\n", None),    # the expected answer holds that byte: the comparison decides
    ("caf\u00e9 \ufffd\n", "x\n", None),  # non-ASCII text is not a control byte
])
def test_control_byte_policy(out, expected, bad):
    why = code_suite.control_byte_problem(out, expected)
    assert (why is None) if bad is None else (bad in why), why


@pytest.mark.parametrize("mode", ["whitespace", "tokens", "float", "exact"])
def test_control_bytes_fail_every_comparison_mode_with_the_reason(mode, pool):
    prog = _prog(pool, "python", "import sys\nsys.stdout.write('5\\x1f\\n')\n")
    res = run_suite(prog, CASES, compare=mode, pool=pool)
    assert (res.status, res.passed) == ("fail", 0), (mode, res)
    assert "control byte 0x1f" in res.first_failure["reason"]


def test_a_callable_checker_never_sees_control_bytes(pool):
    seen = []
    res = run_suite(_prog(pool, "python", "print('\\x00')\n"), CASES, compare="checker",
                    checker=lambda i, e, a: seen.append(a) or True, pool=pool)
    assert (res.status, seen) == ("fail", [])


FLOOD = {  # 31 MiB of 0x01 on stdout under a 32 MiB output cap: a wrong answer, in JSON 6 bytes per byte
    "c": "#include <stdio.h>\n#include <string.h>\nint main(void){static char b[1<<20];memset(b,1,sizeof b);"
         "for(int i=0;i<31;i++)fwrite(b,1,sizeof b,stdout);return 0;}\n",
    "python": "import sys\nfor i in range(31):\n    sys.stdout.write('\\x01'*(1<<20))\n",
}


@pytest.mark.parametrize("tier", [p.values[0] for p in TIERS], ids=[p.id for p in TIERS])
@pytest.mark.parametrize("lang", sorted(FLOOD))
def test_control_bytes_up_to_the_output_cap_are_graded_not_a_sandbox_error(lang, tier):
    """The verdict frame used to have a fixed 160 MiB cap: 31 MiB of control bytes, escaped by JSON
    (``\\u0001``), made it 186 MiB and the run a ``sandbox_error`` (score None)."""
    if tier == "B" and not tier_available("B"):
        pytest.skip("tier B unavailable here")
    big = SandboxPool(1, tier=tier, limits=Limits(output_kb=32 << 10))
    try:
        res = run_suite(_prog(big, lang, FLOOD[lang]), CASES, time_limit=20, pool=big)
    finally:
        big.close()
    assert (res.status, res.passed) == ("fail", 0), (lang, res.first_failure)
    assert "control byte 0x01" in res.first_failure["reason"]

