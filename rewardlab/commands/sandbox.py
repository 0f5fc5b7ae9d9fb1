"""``rewardlab sandbox``: run code in the isolation sandbox by hand, and show the isolation tier.

    rewardlab sandbox info                                   # which tier runs code here, and why
    rewardlab sandbox run sol.py --tests check.py --entry-point add
    rewardlab sandbox run sol.py --stdin in.txt --expected out.txt
    rewardlab sandbox run sol.py --tests check.py --entry-point add --tier B --json
    rewardlab sandbox serve --port 8080                      # SandboxFusion's POST /run_code

``run`` prints the status (pass, fail, timeout, memory, crash, output_limit, error,
sandbox_error), the isolation tier and the first failure; it exits 0 on pass and 1 otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from rewardlab.errors import RewardlabError
from rewardlab.fields import with_choices
from rewardlab.sandbox import Limits, get_pool
from rewardlab.sandbox.isolation import TIERS, detect_tier

TIER_HELP = with_choices("Isolation tier (default auto: the strongest available).", TIERS)


def _read(path: str | None, what: str) -> str | None:
    if path is None:
        return None
    p = Path(path)
    if not p.is_file():
        raise RewardlabError(f"{what} {path}: no such file")
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise RewardlabError(f"{what} {path}: not UTF-8 text") from None


@click.group("sandbox")
def sandbox() -> None:
    """Run code in the isolation sandbox."""


@sandbox.command("info")
@click.option("--tier", default=None, help=TIER_HELP)
def info(tier: str | None) -> None:
    """Print the isolation tier chosen on this machine and the languages it can run (and why not the others)."""
    from rewardlab.sandbox.languages import available  # lazy: probes the toolchains

    t = detect_tier(tier)
    click.echo(t.summary())
    click.echo(f"interpreter: {t.python}")
    click.echo(f"runtime: {t.runtime}")
    for note in t.notes:
        click.echo(f"note: {note}")
    for name, why in available().items():
        click.echo(f"language {name}: {'available' if why is None else 'unavailable: ' + why}")


@sandbox.command("run")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--tests", "tests_file", default=None, help="File defining check(candidate).")
@click.option("--entry-point", default=None, help="Function the tests call, e.g. add.")
@click.option("--prompt", "prompt_file", default=None, help="Trusted task code (helpers the tests use).")
@click.option("--stdin", "stdin_file", default=None, help="stdin for a stdin/stdout problem.")
@click.option("--expected", "expected_file", default=None, help="Expected stdout (stdin/stdout problem).")
@click.option("--timeout", type=float, default=5.0, show_default=True, help="Wall-clock seconds.")
@click.option("--memory-mb", type=int, default=768, show_default=True)
@click.option("--tier", default=None, help=TIER_HELP)
@click.option("--partial", is_flag=True, help="Count every assert instead of stopping at the first failure.")
@click.option("--legacy", is_flag=True, help="Run tests inside the untrusted process (identity/custom classes).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def run(file: str, tests_file: str | None, entry_point: str | None, prompt_file: str | None,
        stdin_file: str | None, expected_file: str | None, timeout: float, memory_mb: int, tier: str | None,
        partial: bool, legacy: bool, as_json: bool) -> None:
    """Run FILE against --tests/--entry-point or --stdin/--expected."""
    if memory_mb <= 0:
        raise RewardlabError("--memory-mb must be positive")
    solution = _read(file, "FILE")
    tests = _read(tests_file, "--tests")
    expected = _read(expected_file, "--expected")
    if expected is None and (tests is None or not entry_point):
        raise RewardlabError("give --tests and --entry-point, or --expected (and --stdin)")
    r = get_pool(tier).execute(solution, tests=tests, entry_point=entry_point, stdin=_read(stdin_file, "--stdin") or "",
                               expected_stdout=expected, timeout=timeout, prelude=_read(prompt_file, "--prompt"),
                               legacy=legacy, partial=partial, limits=Limits(memory_mb=memory_mb))
    if as_json:
        click.echo(json.dumps({"passed": r.passed, "status": r.status, "details": r.details}))
    else:
        d = r.details
        unit = "asserts" if partial else "check() runs"  # without --partial, check() stops at its first failure
        counts = f", {d.get('tests_passed', 0)}/{d.get('tests_total', 0)} {unit}" if expected is None else ""
        click.echo(f"{r.status} (tier {d.get('tier')}, {1000 * d.get('wall', 0):.0f} ms{counts})")
        if d.get("error"):
            click.echo(f"  {d['error']}")
        if d.get("integrity") == "legacy":
            click.echo("  note: legacy mode (tests ran inside the untrusted process)")
    raise SystemExit(0 if r.passed else 1)


@sandbox.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=int, default=8080, show_default=True)
@click.option("--tier", default=None, help=TIER_HELP)
@click.option("--verbose", is_flag=True, help="Log every request.")
def serve(host: str, port: int, tier: str | None, verbose: bool) -> None:
    """Answer SandboxFusion's POST /run_code (code, language, stdin, compile_timeout, run_timeout,
    files) with its response shape, so verl's sandbox_fusion client can use this sandbox."""
    from rewardlab.sandbox.fusion import make_server
    from rewardlab.sandbox.languages import available

    srv = make_server(host, port, tier=tier, verbose=verbose)
    click.echo(f"rewardlab sandbox: {srv.pool.tier.summary()}")  # type: ignore[attr-defined]
    for lang, why in available().items():
        click.echo(f"  {lang}: {'ok' if why is None else 'unavailable: ' + why}")
    click.echo(f"listening on http://{host}:{srv.server_address[1]}/run_code")
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
