"""The official e2b Python SDK (sync API, v1 routes, polling watchers) against the whole system."""
import time
import uuid

import pytest
from e2b import Sandbox, SandboxQuery, SandboxState
from e2b.exceptions import NotFoundException, SandboxException
from e2b.sandbox.commands.command_handle import CommandExitException


@pytest.fixture
def sbx(system):
    s = Sandbox.create(envs={"FOO": "bar"})
    yield s
    try:
        s.kill()
    except Exception:
        pass


def test_create_run_and_files(sbx):
    assert sbx.is_running()
    r = sbx.commands.run("echo $FOO; whoami; pwd")
    assert r.exit_code == 0
    assert r.stdout == "bar\nuser\n/home/user\n"
    info = sbx.files.write("hello.txt", "from python")
    assert info.path == "/home/user/hello.txt"
    assert sbx.files.read("hello.txt") == "from python"
    names = [e.name for e in sbx.files.list("/home/user")]
    assert "hello.txt" in names


def test_nonzero_exit_raises(sbx):
    with pytest.raises(CommandExitException) as exc:
        sbx.commands.run("exit 7")
    assert exc.value.exit_code == 7


def test_list_by_metadata_and_kill(system):
    tag = uuid.uuid4().hex
    s = Sandbox.create(metadata={"tag": tag})
    listed = Sandbox.list(query=SandboxQuery(metadata={"tag": tag})).next_items()
    assert [x.sandbox_id for x in listed] == [s.sandbox_id]
    assert s.kill() is True
    assert Sandbox.kill(s.sandbox_id) is False
    running = SandboxQuery(metadata={"tag": tag}, state=[SandboxState.RUNNING])
    assert Sandbox.list(query=running).next_items() == []


def test_get_info_and_timeout(sbx):
    info = Sandbox.get_info(sbx.sandbox_id)
    assert info.sandbox_id == sbx.sandbox_id
    assert info.template_id == "base"
    sbx.set_timeout(3)
    time.sleep(5)
    assert not sbx.is_running()
    with pytest.raises(NotFoundException):
        Sandbox.get_info(sbx.sandbox_id)


def test_pause_and_resume_keep_files(sbx):
    sbx.files.write("/home/user/kept.txt", "kept")
    sbx.pause()
    assert not sbx.is_running()
    back = Sandbox.connect(sbx.sandbox_id)
    assert back.files.read("/home/user/kept.txt") == "kept"
    assert back.commands.run("echo $FOO").stdout == "bar\n"


def test_polling_watcher(sbx):
    sbx.files.make_dir("/home/user/w")
    watcher = sbx.files.watch_dir("/home/user/w")
    sbx.files.write("/home/user/w/f.txt", "x")
    deadline = time.time() + 5
    names = []
    while time.time() < deadline and "f.txt" not in names:
        names += [e.name for e in watcher.get_new_events()]
        time.sleep(0.1)
    watcher.stop()
    assert "f.txt" in names


def test_update_network_replaces_the_rules(sbx):
    sbx.update_network({"allow_out": ["example.com"], "deny_out": ["0.0.0.0/0"]})
    network = sbx.get_info().network
    assert network["allow_out"] == ["example.com"]
    assert network["deny_out"] == ["0.0.0.0/0"]
    # Omitted fields are cleared, as on E2B.
    sbx.update_network({"deny_out": ["10.0.0.0/8"]})
    network = sbx.get_info().network or {}
    assert network.get("allow_out") in (None, [])
    assert network["deny_out"] == ["10.0.0.0/8"]
    # The sandbox keeps working through the changes.
    assert sbx.commands.run("echo still-here").stdout == "still-here\n"


def test_update_network_refuses_bad_rules(sbx):
    with pytest.raises(SandboxException, match="not a valid IP address or CIDR block"):
        sbx.update_network({"deny_out": ["10.0.0.0/33"]})
