"""The code reward in every sandbox language: compile in the sandbox, compile errors, the compile
cache, language choice, the built-in multi-language task (evals/code_multilang.jsonl) and the
attack rows of each language.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_code_languages.py

A language whose toolchain is missing here is skipped with the reason
(:func:`rewardlab.sandbox.languages.available`); ``setup.sh`` installs them all on Debian.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rewardlab.rewards import code_reward
from rewardlab.rewards.code import select_code
from rewardlab.rewards.pool import score_batch
from rewardlab.sandbox.languages import LANGUAGES, CompileCache, available, compile_program, run_program
from rewardlab.tasks import load_task

REPO = Path(__file__).resolve().parent.parent
TASK = REPO / "evals" / "code_multilang.jsonl"
ROWS = [json.loads(line) for line in TASK.read_text().splitlines() if line.strip()]
AVAIL = available()
LANGS = list(LANGUAGES)


def need(lang: str) -> None:
    if AVAIL[lang] is not None:
        pytest.skip(f"{lang} unavailable here: {AVAIL[lang]}")


def fence(lang: str, code: str) -> str:
    return f"Here is my program:\n```{lang}\n{code}```\n"


def rows_of(lang: str) -> list[dict]:
    return [r for r in ROWS if r["reference"]["language"] == lang]


# ------------------------------------------------------------------------------ built-in task
def test_builtin_task_loads_as_a_code_task():
    rows = load_task(str(TASK), "test")
    assert len(rows) == len(ROWS) == 3 * len(LANGS)
    assert {r.meta["reward"] for r in rows} == {"code"}
    assert {r.reference["language"] for r in rows} == set(LANGS)


@pytest.mark.parametrize("lang", LANGS)
def test_builtin_task_references_pass_and_planted_wrong_fail(lang):
    """Every language: each problem's reference solution scores 1.0 and its planted wrong one 0.0,
    graded (status ok, sandbox_status fail) with the failing test named."""
    need(lang)
    items = [(r, w) for r in rows_of(lang) for w in ("solution", "wrong_solution")]

    def one(item):
        row, which = item
        return code_reward(fence(lang, row[which]), row["reference"])

    with ThreadPoolExecutor(2) as ex:
        results = list(ex.map(one, items))
    for (row, which), r in zip(items, results):
        assert r.info["language"] == lang, (row["id"], r.info)
        if which == "solution":
            assert (r.score, r.info["sandbox_status"]) == (1.0, "pass"), (row["id"], r.info)
        else:
            assert (r.score, r.info["status"], r.info["sandbox_status"]) == (0.0, "ok", "fail"), (row["id"], r.info)
            assert (isinstance(r.info["failed_test"], int)
                    and r.info["error"].startswith(f"test {r.info['failed_test']}: fail"))


def test_builtin_task_through_score_batch():
    """The whole task, references and planted wrong solutions of every available language, in one batch."""
    rows = [r for r in ROWS if AVAIL[r["reference"]["language"]] is None]
    comps = [fence(r["reference"]["language"], r[w]) for r in rows for w in ("solution", "wrong_solution")]
    refs = [r["reference"] for r in rows for _ in (0, 1)]
    out = score_batch(code_reward, comps, refs, deadline=120.0, wall_cap=300.0, workers=4)
    assert [o.score for o in out] == [1.0, 0.0] * len(rows), [(o.score, o.info.get("error")) for o in out]


# ------------------------------------------------------------------------------ compiling
BROKEN = {  # a syntax error in each compiled language, and a word its compiler prints
    "c": ("int main(void) { return 0 }\n", "error"),
    "cpp": ("int main() { int x = ; }\n", "error"),
    "java": ("public class Main { public static void main(String[] a) { int x = ; } }\n", "error"),
    "go": ("package main\nfunc main() { x := }\n", "syntax error"),
    "rust": ("fn main() { let x = ; }\n", "error"),
}


@pytest.mark.parametrize("lang", sorted(BROKEN))
def test_compile_error_status_with_the_compilers_first_lines(lang):
    need(lang)
    src, word = BROKEN[lang]
    r = code_reward(fence(lang, src), {"cases": [{"stdin": "", "stdout": "0\n"}]})
    assert (r.score, r.info["status"], r.info["sandbox_status"]) == (0.0, "compile_error", "compile_error"), r.info
    assert word in r.info["error"] and len(r.info["error"].splitlines()) <= 12, r.info["error"]


def test_a_compile_timeout_is_not_cached_as_a_compile_error():
    """Issue 41: a correct source whose compile once timed out (a short compile_timeout, a loaded
    machine) compiles and scores 1 later; only deterministic outcomes are remembered."""
    need("c")
    cache = CompileCache()
    src = "#include <stdio.h>\nint main(void){int a,b;scanf(\"%d %d\",&a,&b);printf(\"%d\\n\",a+b);return 0;}\n/*41*/\n"
    p1 = compile_program("c", src, cache=cache, timeout=0.01)
    assert (p1.ok, p1.status, p1.info["compile_status"]) == (False, "compile_error", "timeout"), p1.info
    p2 = compile_program("c", src, cache=cache, timeout=60)
    assert (p2.ok, p2.cached) == (True, False), p2.info
    assert run_program(p2, "2 3\n", timeout=5).stdout == "5\n"
    assert compile_program("c", src, cache=cache).cached  # a success is remembered


def test_java_public_class_after_imports_on_one_line():
    """Issue 41: ``import ...; public class Solution {`` on one line names the file Solution.java."""
    need("java")
    src = ("import java.util.*; public class Solution { public static void main(String[] x) { Scanner s = new "
           "Scanner(System.in); System.out.println(s.nextInt() + s.nextInt()); } }\n")
    r = code_reward(fence("java", src), {"cases": [{"stdin": "2 3\n", "stdout": "5\n"}]})
    assert r.score == 1.0, r.info


def test_compile_cache_one_compile_per_problem_and_per_source():
    """The tests of a problem share one compile; the same source again is a hit; other flags or
    another source are misses."""
    need("c")
    cache = CompileCache()
    src = "#include <stdio.h>\nint main(void){int a,b;scanf(\"%d %d\",&a,&b);printf(\"%d\\n\",a*b);return 0;}\n"
    p1 = compile_program("c", src, cache=cache)
    p2 = compile_program("c", src, cache=cache)
    p3 = compile_program("c", src + "\n", cache=cache)
    assert (p1.ok, p1.cached, p2.cached, p3.cached) == (True, False, True, False)
    assert cache.stats()["hits"] == 1 and cache.stats()["misses"] == 2
    for a, b in ((2, 3), (4, 5), (-1, 7)):
        r = run_program(p2, f"{a} {b}\n", timeout=5)
        assert (r.status, r.stdout) == ("ran", f"{a * b}\n")
    # through the reward: a 4-test problem compiles once (the process-wide cache)
    from rewardlab.sandbox import languages

    before = languages.CACHE.stats()
    ref = {"cases": [{"stdin": f"{i} 2\n", "stdout": f"{2 * i}\n"} for i in range(4)]}
    src2 = src.replace("a*b", "b*a")
    assert code_reward(fence("c", src2), ref).score == 1.0
    r = code_reward(fence("c", src2), ref)
    after = languages.CACHE.stats()
    assert (after["misses"] - before["misses"], after["hits"] - before["hits"]) == (1, 1)
    assert r.score == 1.0 and r.info["compile"]["cached"] is True


def test_compile_has_its_own_time_limit():
    """A compile that cannot finish in its time limit is a compile_error saying so (C++ template
    recursion that takes far longer than 1 s to instantiate)."""
    need("cpp")
    src = ("template<int N> struct F { static const long v = F<N-1>::v + F<N-2>::v; };\n"
           "template<> struct F<1> { static const long v = 1; };\ntemplate<> struct F<0> { static const long v = 0; };"
           "\n"
           "#include <cstdio>\nint main() { std::printf(\"%ld\\n\", F<40>::v); }\n"
           "template<int D> struct Deep { typedef typename Deep<D-1>::T T; };\ntemplate<> struct Deep<0> { typedef int "
           "T; };\n"
           "Deep<100000>::T dummy;\n")
    r = code_reward(fence("cpp", src), {"cases": [{"stdin": "", "stdout": "0\n"}], "compile_timeout": 1})
    assert (r.score, r.info["status"]) == (0.0, "compile_error"), r.info


# ------------------------------------------------------------------------------ language choice
@pytest.mark.parametrize("completion,reference,expected", [
    # the fence's tag names the language
    ("```cpp\nint main(){}\n```", {}, ("cpp", "int main(){}\n", True)),
    ("```c++\nX\n```", {}, ("cpp", "X\n", True)),
    ("```rs\nX\n```", {}, ("rust", "X\n", True)),
    # a Python (or untagged) block wins without a language field: old rows unchanged
    ("```js\nx\n```\n```py\nE\n```", {}, ("python", "E\n", True)),
    ("```\nprint(1)\n```", {}, ("python", "print(1)\n", True)),
    # the reference's language: its own blocks first, then untagged blocks in that language
    ("```python\nP\n```\n```java\nJ\n```", {"language": "java"}, ("java", "J\n", True)),
    ("```\nU\n```", {"language": "go"}, ("go", "U\n", True)),
    # a block in another known language still runs in its own language
    ("```python\nP\n```", {"language": "cpp"}, ("python", "P\n", True)),
    # no fence: the raw text in the reference's language
    ("echo 5", {"language": "bash"}, ("bash", "echo 5", False)),
])
def test_language_choice(completion, reference, expected):
    assert select_code(completion, reference) == expected


def test_allowed_languages_and_unknown_language():
    ref = {"cases": [{"stdin": "", "stdout": "5\n"}], "allowed_languages": ["cpp", "c"]}
    r = code_reward("```python\nprint(5)\n```", ref)
    assert (r.score, r.info["status"]) == (0.0, "wrong_language")
    r = code_reward("print(5)", {"cases": [{"stdin": "", "stdout": "5\n"}], "language": "cobol"})
    assert (r.score, r.info["status"]) == (None, "unavailable")


# ------------------------------------------------------------------------------ attacks per language
# (language, attack, program, accepted statuses). Every row must be contained: never a pass, the
# caller alive, nothing left outside the scratch dir, no process left behind. Expected stdout is
# "5\n" for input "2 3\n" (the add problem).
MARK = "/tmp/rewardlab_lang_pwned"
ATTACKS = [
    # fork bombs: RLIMIT_NPROC and the wall clock stop them; the whole tree is killed afterwards
    ("c", "fork_bomb", "#include <unistd.h>\nint main(void){for(;;)fork();}\n", {"timeout", "crash", "error"}),
    ("cpp", "fork_bomb", "#include <unistd.h>\nint main(){for(;;)fork();}\n", {"timeout", "crash", "error"}),
    ("bash", "fork_bomb", "f(){ f | f & }; f\nsleep 100\n", {"timeout", "crash", "error", "fail"}),
    ("go", "fork_bomb", "package main\nimport \"syscall\"\nfunc main(){for{syscall.RawSyscall(57,0,0,0)}}\n",
     {"timeout", "crash", "error"}),
    ("rust", "fork_bomb", "extern \"C\" { fn fork() -> i32; }\nfn main(){ loop { unsafe { fork(); } } }\n",
     {"timeout", "crash", "error"}),
    ("javascript", "fork_bomb", "const cp=require('child_process');for(;;){try{cp.spawn('/usr/bin/sleep',['100'])"
     "}catch(e){}}\n",
     {"timeout", "crash", "error", "memory"}),
    ("java", "fork_bomb", "public class Main{public static void main(String[] a)throws Exception{for(;;){try{new "
     "ProcessBuilder(\"/usr/bin/sleep\",\"100\").start();}catch(Exception e){}}}}\n",
     {"timeout", "crash", "error", "memory"}),
    # memory bombs: touched memory until 3 GiB (RLIMIT_AS / the job's RSS cap / the JVM's -Xmx; touching
    # ~1 GiB on a loaded machine may outlast the 2 s wall clock first: a timeout is contained too)
    ("c", "memory_bomb", "#include <stdlib.h>\n#include <string.h>\nint main(void){for(int i=0;i<48;i++)"
     "{char*p=malloc(64<<20);if(!p)return 3;memset(p,1,64<<20);}return 0;}\n",
     {"error", "crash", "memory", "timeout"}),
    ("cpp", "memory_bomb", "#include <vector>\nint main(){std::vector<std::vector<char>> v;for(int i=0;i<48;i++)"
     "v.emplace_back(64<<20,1);}\n",
     {"error", "crash", "memory", "timeout"}),
    ("java", "memory_bomb", "import java.util.*;public class Main{public static void main(String[] a){List<byte[]> "
     "l=new ArrayList<>();for(int i=0;i<48;i++)l.add(new byte[64<<20]);}}\n",
     {"error", "crash", "memory", "timeout"}),
    ("javascript", "memory_bomb", "const a=[];for(let i=0;i<48;i++){a.push(Buffer.alloc(64<<20,1));}\n",
     {"error", "crash", "memory", "timeout"}),
    ("go", "memory_bomb", "package main\nfunc main(){var l [][]byte;for i:=0;i<48;i++{b:=make([]byte,64<<20);for "
     "j:=range b{b[j]=1};l=append(l,b)}}\n",
     {"error", "crash", "memory", "timeout"}),
    ("rust", "memory_bomb", "fn main(){let mut l=Vec::new();for _ in 0..48{l.push(vec![1u8;64<<20]);}println!(\"{}\","
     "l.len());}\n",
     {"error", "crash", "memory", "timeout"}),
    ("bash", "memory_bomb", "x=a; for i in $(seq 32); do x=$x$x; done; echo ${#x}\n",
     {"error", "crash", "memory", "fail", "timeout"}),
    # writing outside the scratch dir (the marker must not appear on the host)
    ("c", "write_outside", f"#include <stdio.h>\nint main(void){{FILE*f=fopen(\"{MARK}\",\"w\");if(f){{fputs(\"x\",f);"
     f"fclose(f);}}puts(\"5\");return 0;}}\n",
     {"pass_if_no_file"}),
    ("bash", "write_outside", f"echo x > {MARK}\necho 5\n", {"pass_if_no_file"}),
    ("javascript", "write_outside", f"try{{require('fs').writeFileSync('{MARK}','x')}}catch(e){{}}\nconsole.log(5)\n",
     {"pass_if_no_file"}),
    ("java", "write_outside", f"public class Main{{public static void main(String[] a)"
     f"{{try{{java.nio.file.Files.writeString(java.nio.file.Path.of(\"{MARK}\"),\"x\");}}catch(Exception e)"
     f"{{}}System.out.println(5);}}}}\n",
     {"pass_if_no_file"}),
    ("go", "write_outside", f"package main\nimport (\"fmt\";\"os\")\nfunc main(){{os.WriteFile(\"{MARK}\",[]byte(\"x\")"
     f",0644);fmt.Println(5)}}\n", {"pass_if_no_file"}),
    ("rust", "write_outside", f"fn main(){{let _=std::fs::write(\"{MARK}\",\"x\");println!(\"5\");}}\n",
     {"pass_if_no_file"}),
    ("cpp", "write_outside", f"#include <fstream>\n#include <iostream>\nint main(){{std::ofstream f(\"{MARK}\");f<<\"x"
     f"\";std::cout<<5<<std::endl;}}\n", {"pass_if_no_file"}),
    # network: connect to a listener of the test on 127.0.0.1 (prints 5 only if it got through)
    ("bash", "network", "exec 3<>/dev/tcp/127.0.0.1/{port} && echo 5\n", {"fail", "error"}),
    ("c", "network", "#include <stdio.h>\n#include <sys/socket.h>\n#include <netinet/in.h>\n#include <arpa/inet.h>\n"
     "int main(void){int s=socket(AF_INET,SOCK_STREAM,0);struct sockaddr_in a={0};a.sin_family=AF_INET;"
     "a.sin_port=htons({port});a.sin_addr.s_addr=inet_addr(\"127.0.0.1\");if(s>=0&&connect(s,(void*)&a,sizeof a)==0)"
     "puts(\"5\");return 0;}\n",
     {"fail", "error"}),
    ("javascript", "network", "const s=require('net').connect({port},'127.0.0.1',()=>{console.log(5);process.exit(0)});"
     "s.on('error',()=>process.exit(0));\n",
     {"fail", "error", "crash"}),
    ("go", "network", "package main\nimport (\"fmt\";\"net\")\nfunc main(){if _,err:=net.Dial(\"tcp\","
     "\"127.0.0.1:{port}\");err==nil{fmt.Println(5)}}\n", {"fail", "error"}),
    ("rust", "network", "fn main(){if std::net::TcpStream::connect(\"127.0.0.1:{port}\").is_ok(){println!(\"5\");}}\n",
     {"fail", "error"}),
    ("java", "network", "public class Main{public static void main(String[] a){try{new java.net.Socket(\"127.0.0.1\","
     "{port});System.out.println(5);}catch(Exception e){}}}\n",
     {"fail", "error"}),
    # the parent's environment: prints 5 only if the trainer's secret is visible
    ("bash", "read_parent_env", "[ -n \"$REWARDLAB_TEST_SECRET\" ] && echo 5; tr '\\0' '\\n' < /proc/$PPID/environ "
     "2>/dev/null | grep -q REWARDLAB_TEST_SECRET && echo 5\n",
     {"fail", "error"}),
    ("c", "read_parent_env", "#include <stdio.h>\n#include <stdlib.h>\nint main(void){if(getenv(\"REWARDLAB_TEST_SECRET"
     "\"))puts(\"5\");return 0;}\n", {"fail", "error"}),
    ("javascript", "read_parent_env", "if(process.env.REWARDLAB_TEST_SECRET)console.log(5)\n", {"fail", "error"}),
    ("java", "read_parent_env", "public class Main{public static void main(String[] a){if(System.getenv("
     "\"REWARDLAB_TEST_SECRET\")!=null)System.out.println(5);}}\n",
     {"fail", "error"}),
    ("go", "read_parent_env", "package main\nimport (\"fmt\";\"os\")\nfunc main(){if os.Getenv(\"REWARDLAB_TEST_SECRET"
     "\")!=\"\"{fmt.Println(5)}}\n", {"fail", "error"}),
    ("rust", "read_parent_env", "fn main(){if std::env::var(\"REWARDLAB_TEST_SECRET\").is_ok(){println!(\"5\");}}\n",
     {"fail", "error"}),
    # kill the parent (and everything it may reach): the caller must survive
    ("bash", "kill_parent", "kill -9 $PPID; kill -9 -1; kill -9 {pid}; echo 4\n", {"fail", "error", "crash"}),
    ("c", "kill_parent", "#include <signal.h>\n#include <unistd.h>\n#include <stdio.h>\nint main(void){kill(getppid(),"
     "9);kill(-1,9);kill({pid},9);puts(\"4\");return 0;}\n",
     {"fail", "error", "crash"}),
    ("go", "kill_parent", "package main\nimport (\"fmt\";\"syscall\")\nfunc main(){syscall.Kill(syscall.Getppid(),9);"
     "syscall.Kill(-1,9);syscall.Kill({pid},9);fmt.Println(4)}\n",
     {"fail", "error", "crash"}),
    ("javascript", "kill_parent", "for(const p of [process.ppid,-1,{pid}]){try{process.kill(p,'SIGKILL')}catch(e)"
     "{}}console.log(4)\n",
     {"fail", "error", "crash"}),
    # output floods: 2 GiB to stdout (the output cap stops it)
    ("c", "output_flood", "#include <stdio.h>\n#include <string.h>\nint main(void){static char b[1<<16];memset(b,'5',"
     "sizeof b);for(int i=0;i<32768;i++)fwrite(b,1,sizeof b,stdout);return 0;}\n",
     {"output_limit", "crash", "timeout"}),
    ("bash", "output_flood", "yes 5\n", {"output_limit", "crash", "timeout"}),
    ("javascript", "output_flood", "const b='5'.repeat(1<<16);for(let i=0;i<32768;i++)process.stdout.write(b);\n",
     {"output_limit", "crash", "timeout", "error"}),
    ("go", "output_flood", "package main\nimport \"os\"\nfunc main(){b:=make([]byte,1<<16);for i:=range b{b[i]='5'};"
     "for i:=0;i<32768;i++{os.Stdout.Write(b)}}\n",
     {"output_limit", "crash", "timeout"}),
    ("rust", "output_flood", "use std::io::Write;\nfn main(){let b=vec![b'5';1<<16];let mut o=std::io::stdout();for _ "
     "in 0..32768{if o.write_all(&b).is_err(){return;}}}\n",
     {"output_limit", "crash", "timeout"}),
    ("java", "output_flood", "public class Main{public static void main(String[] a){byte[] b=new byte[1<<16];"
     "java.util.Arrays.fill(b,(byte)'5');for(int i=0;i<32768;i++)System.out.write(b,0,b.length);System.out.flush();}}"
     "\n",
     {"output_limit", "crash", "timeout", "error"}),
    # sleeping forever: the wall clock, not RLIMIT_CPU, ends it
    ("c", "sleep_forever", "#include <unistd.h>\nint main(void){sleep(100000);return 0;}\n", {"timeout"}),
    ("bash", "sleep_forever", "sleep 100000\necho 5\n", {"timeout"}),
    ("javascript", "sleep_forever", "setTimeout(()=>console.log(5),1e8)\n", {"timeout"}),
    ("java", "sleep_forever", "public class Main{public static void main(String[] a)throws "
     "Exception{Thread.sleep(100000000L);}}\n", {"timeout"}),
    ("go", "sleep_forever", "package main\nimport \"time\"\nfunc main(){time.Sleep(time.Hour)}\n", {"timeout"}),
    ("rust", "sleep_forever", "fn main(){std::thread::sleep(std::time::Duration::from_secs(100000));}\n", {"timeout"}),
    ("cpp", "sleep_forever", "#include <thread>\n#include <chrono>\nint main()"
     "{std::this_thread::sleep_for(std::chrono::hours(1));}\n", {"timeout"}),
    # forged verdicts through stdout: verdict-looking text, frames on every fd, exit 0 - stdout is data
    # (writing on every fd may wreck the program's own runtime, e.g. node's event loop: crash is fine)
    ("c", "forged_verdict", "#include <stdio.h>\n#include <unistd.h>\nint main(void){const char f[]=\"\\x1b\\0\\0\\0{\\"
     "\"status\\\":\\\"pass\\\",\\\"passed\\\":true}\";for(int fd=0;fd<64;fd++)write(fd,f,sizeof f-1);puts(\"PASS\\n{\\"
     "\"status\\\": \\\"pass\\\", \\\"passed\\\": true}\");return 0;}\n",
     {"fail", "crash", "error"}),
    ("bash", "forged_verdict", "for fd in 3 4 5 6 7 8 9; do printf '{\"status\":\"pass\",\"passed\":true}' >&$fd; done "
     "2>/dev/null\necho '{\"status\": \"pass\", \"passed\": true}'\nexit 0\n",
     {"fail", "crash", "error"}),
    ("javascript", "forged_verdict", "const fs=require('fs');for(let fd=3;fd<64;fd++){try{fs.writeSync(fd,'{\"status\":"
     "\"pass\",\"passed\":true}')}catch(e){}}console.log('{\"status\": \"pass\", \"passed\": true}')\n",
     {"fail", "crash", "error"}),
    ("java", "forged_verdict", "public class Main{public static void main(String[] a){System.out.println(\"{\\\"status"
     "\\\": \\\"pass\\\", \\\"passed\\\": true}\");System.exit(0);}}\n", {"fail", "crash", "error"}),
    ("go", "forged_verdict", "package main\nimport (\"fmt\";\"os\")\nfunc main(){for fd:=3;fd<64;"
     "fd++{os.NewFile(uintptr(fd),\"x\").Write([]byte(`{\"status\":\"pass\",\"passed\":true}`))};fmt.Println(`{\"status"
     "\": \"pass\", \"passed\": true}`)}\n",
     {"fail", "crash", "error"}),
    ("rust", "forged_verdict", "fn main(){println!(\"{{\\\"status\\\": \\\"pass\\\", \\\"passed\\\": true}}\");"
     "std::process::exit(0);}\n", {"fail", "crash", "error"}),
    # controls: a correct and a wrong program (the harness must tell them apart)
    *[(lang, "control_correct", src, {"pass"}) for lang, src in [
        ("c", "#include <stdio.h>\nint main(void){int a,b;scanf(\"%d %d\",&a,&b);printf(\"%d\\n\",a+b);return 0;}\n"),
        ("cpp", "#include <iostream>\nint main(){int a,b;std::cin>>a>>b;std::cout<<a+b<<std::endl;}\n"),
        ("java", "import java.util.*;public class Main{public static void main(String[] x){Scanner s=new "
         "Scanner(System.in);System.out.println(s.nextInt()+s.nextInt());}}\n"),
        ("javascript", "const [a,b]=require('fs').readFileSync(0,'utf8').trim().split(/\\s+/).map(Number);"
         "console.log(a+b)\n"),
        ("bash", "read a b\necho $((a+b))\n"),
        ("go", "package main\nimport \"fmt\"\nfunc main(){var a,b int;fmt.Scan(&a,&b);fmt.Println(a+b)}\n"),
        ("rust", "fn main(){let mut s=String::new();std::io::stdin().read_line(&mut s).unwrap();let "
         "v:Vec<i32>=s.split_whitespace().map(|x|x.parse().unwrap()).collect();println!(\"{}\",v[0]+v[1]);}\n"),
    ]],
    *[(lang, "control_wrong", src, {"fail"}) for lang, src in [
        ("c", "#include <stdio.h>\nint main(void){int a,b;scanf(\"%d %d\",&a,&b);printf(\"%d\\n\",a*b);return 0;}\n"),
        ("bash", "read a b\necho $((a*b))\n"),
        ("javascript", "console.log(6)\n"),
    ]],
]


def _attack_id(row) -> str:
    return f"{row[0]}-{row[1]}"


@pytest.fixture(scope="module")
def listener():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    s.setblocking(False)
    yield s
    s.close()


def _server_chain(pool) -> set[int]:
    """The idle servers' own processes (launch / reaper / bwrap / server.py), not what is under them:
    a server that replaced a recycled one is new, and is no leftover of a job."""
    out = set()
    for s in list(pool._idle):
        for p in {s.proc.pid} | descendants(s.proc.pid):
            try:
                with open(f"/proc/{p}/cmdline", "rb") as fh:
                    argv = fh.read().split(b"\0")
            except OSError:
                continue
            if p == s.proc.pid or any(a.endswith((b"server.py", b"bwrap")) for a in argv):
                out.add(p)
    return out


def descendants(pid: int | None = None) -> set[int]:
    """Every live descendant of ``pid`` (default: this process), through ``/proc/<pid>/task/*/children``."""
    root = os.getpid() if pid is None else pid
    out, stack = set(), [root]
    while stack:
        p = stack.pop()
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as fh:
                    kids = [int(x) for x in fh.read().split()]
                stack += kids
                out.update(kids)
        except OSError:
            pass
    out.discard(root)
    return out


def _contained(lang: str, name: str, program: str, accept: set, tier: str | None, listener, monkeypatch) -> None:
    from rewardlab.sandbox import get_pool
    from rewardlab.sandbox import languages

    need(lang)
    if os.path.exists(MARK):
        os.unlink(MARK)
    monkeypatch.setenv("REWARDLAB_TEST_SECRET", "hunter2")
    port = listener.getsockname()[1]
    program = program.replace("{port}", str(port)).replace("{pid}", str(os.getpid()))
    pool = get_pool(tier)
    prog = compile_program(lang, program, pool=pool, timeout=120)
    assert prog.ok, prog.info
    before = descendants()
    # a row that can only end in a timeout (sleeping forever) waits the clock out: 1 s shows the wall
    # clock ends it as well as 2 s; every other row keeps 2 s to reach its limit or its verdict
    r = run_program(prog, "2 3\n", timeout=1.0 if accept == {"timeout"} else 2.0, pool=pool)
    from rewardlab.rewards.code_suite import compare_output

    ok, _ = compare_output(r.stdout, "5\n") if r.status == "ran" else (False, "")
    status = "pass" if ok else ("fail" if r.status == "ran" else r.status)
    if accept == {"pass_if_no_file"}:
        assert not os.path.exists(MARK), f"{lang} {name}: wrote {MARK} on the host"
        assert status in ("pass", "fail", "error"), (status, r)
    else:
        assert status in accept, (lang, name, status, r.error, r.stderr[-300:])
    try:
        conn, _ = listener.accept()
        conn.close()
        raise AssertionError(f"{lang} {name}: reached the network")
    except BlockingIOError:
        pass
    assert not (descendants() - before - _server_chain(pool)), "processes left behind"
    assert languages.unavailable_reason(lang) is None  # the caller is alive and the pool still works
    again = run_program(compile_program(lang, dict((r[0], r[2]) for r in ATTACKS if r[1] == "control_correct")[lang],
                                        pool=pool, timeout=120), "2 3\n", timeout=5.0, pool=pool)
    assert again.status == "ran" and again.stdout.strip() == "5", again


@pytest.mark.parametrize("row", ATTACKS, ids=_attack_id)
def test_attack_contained_tier_auto(row, listener, monkeypatch):
    """Each attack in each language, in the auto tier (A where bubblewrap works)."""
    _contained(*row, None, listener, monkeypatch)


def _tier_b() -> bool:
    from rewardlab.errors import RewardlabError
    from rewardlab.sandbox import isolation

    try:
        isolation.detect_tier("B")
        return True
    except RewardlabError:
        return False


@pytest.mark.parametrize("row", ATTACKS, ids=_attack_id)
def test_attack_contained_tier_b(row, listener, monkeypatch):
    """The same rows in tier B (no namespaces: uid + Landlock + seccomp)."""
    if not _tier_b():
        pytest.skip("tier B is not available on this machine")
    _contained(*row, "B", listener, monkeypatch)
