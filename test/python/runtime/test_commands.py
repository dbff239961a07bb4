import time

import pytest
from e2b import CommandExitException, TimeoutException


def test_run_returns_output_and_exit_code(sandbox):
    r = sandbox.commands.run('echo "Hello, World!"')
    assert (r.exit_code, r.stdout, r.stderr) == (0, "Hello, World!\n", "")


def test_non_zero_exit_raises_with_output(sandbox):
    with pytest.raises(CommandExitException) as e:
        sandbox.commands.run("echo out; exit 3")
    assert (e.value.exit_code, e.value.stdout, e.value.error) == (3, "out\n", "exit status 3")


def test_env_user_and_cwd(sandbox):
    assert sandbox.commands.run("echo $FOO").stdout == "bar\n"
    assert sandbox.commands.run("echo $X", envs={"X": "y"}).stdout == "y\n"
    assert sandbox.commands.run("whoami; pwd").stdout == "user\n/home/user\n"
    assert sandbox.commands.run("whoami; pwd", user="root", cwd="/tmp").stdout == "root\n/tmp\n"


def test_timeout_raises(sandbox):
    started = time.time()
    with pytest.raises(TimeoutException):
        sandbox.commands.run("sleep 10", timeout=1)
    assert time.time() - started < 5


def test_background_list_kill(sandbox):
    handle = sandbox.commands.run("sleep 30", background=True)
    assert handle.pid in [p.pid for p in sandbox.commands.list()]
    assert sandbox.commands.kill(handle.pid) is True
    assert sandbox.commands.kill(999999) is False


def test_stdin_and_close_stdin(sandbox):
    handle = sandbox.commands.run("cat", background=True, stdin=True)
    sandbox.commands.send_stdin(handle.pid, "Hello, World!")
    sandbox.commands.close_stdin(handle.pid)
    result = handle.wait()
    assert (result.exit_code, result.stdout) == (0, "Hello, World!")


def test_is_running(sandbox):
    assert sandbox.is_running() is True
