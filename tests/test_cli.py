"""The CLI front door: help, version, unknown commands, one-line errors."""

import subprocess
import sys


def run(*args):
    return subprocess.run([sys.executable, "-m", "rewardlab", *args], capture_output=True, text=True)


def test_help_lists_commands():
    r = run("--help")
    assert r.returncode == 0
    assert "rewardlab" in r.stdout


def test_version():
    r = run("--version")
    assert r.returncode == 0 and "0.1.0" in r.stdout


def test_unknown_command_is_one_line_error():
    r = run("no-such-command")
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    assert "No such command" in r.stderr


def test_a_commands_exit_code_reaches_the_shell(monkeypatch):
    """click returns (not raises) a command's ``ctx.exit(n)`` without standalone mode: main must pass it on."""
    import click
    import pytest

    from rewardlab import cli

    @click.command("exit3")
    @click.pass_context
    def exit3(ctx):
        ctx.exit(3)

    monkeypatch.setitem(cli.COMMANDS, "exit3", (__name__, "exit3", "test"))
    monkeypatch.setitem(globals(), "exit3", exit3)
    monkeypatch.setattr(cli, "is_available", lambda name: True)
    with pytest.raises(SystemExit) as info:
        cli.main(["exit3"])
    assert info.value.code == 3
