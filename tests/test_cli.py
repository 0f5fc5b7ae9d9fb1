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
