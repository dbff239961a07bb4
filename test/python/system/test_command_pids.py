"""The Python SDK sees command pids as the sandbox does (as on E2B, where envd runs in the VM):
a handle's pid is the process's $$ and names it for /proc and kill inside the sandbox, for
commands.list and commands.kill."""
import pytest
from e2b.sandbox.commands.command_handle import CommandExitException


def first_line(handle):
    out = ""
    for stdout, _stderr, _pty in handle:
        out += stdout or ""
        if "\n" in out:
            return out.split("\n")[0]
    raise AssertionError(f"no line printed: {out!r}")


def test_handle_pid_is_the_pid_inside(sbx):
    h = sbx.commands.run("echo $$; exec sleep 60", background=True)
    assert int(first_line(h)) == h.pid
    assert sbx.commands.run(f"tr '\\0' ' ' < /proc/{h.pid}/cmdline").stdout.strip() == "sleep 60"
    assert h.pid in [p.pid for p in sbx.commands.list()]
    assert sbx.commands.kill(h.pid)


def test_kill_from_inside_ends_the_command(sbx):
    h = sbx.commands.run("echo up; exec sleep 60", background=True)
    first_line(h)
    sbx.commands.run(f"kill {h.pid}")
    with pytest.raises(CommandExitException) as exc:
        h.wait()
    assert exc.value.error == "signal: terminated"
