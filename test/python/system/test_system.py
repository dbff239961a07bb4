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


def _admin(method, path, body=None, key=None):
    """The edge's HTTP API with the admin key (or `key`): the parsed JSON answer."""
    import json
    import os
    import urllib.request

    req = urllib.request.Request(
        os.environ["E2B_API_URL"] + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"x-api-key": key or os.environ["E2B_API_KEY"], "content-type": "application/json"},
    )
    with urllib.request.urlopen(req) as res:
        text = res.read()
    return json.loads(text) if text else None


def test_failed_resume_goes_back_to_paused(system):
    """A resume whose ready command fails: connect raises with the reason (409), the sandbox is
    paused again, and a later connect resumes it with its files (test/e2e/resume-failed.test.ts
    does the same through the JS SDK)."""
    team = "py-" + uuid.uuid4().hex[:12]
    key = _admin("POST", "/api-keys", {"name": "failing", "teamName": team})["key"]
    start = (
        "if [ -e /home/user/fail-next ]; then mv /home/user/fail-next /home/user/fail; "
        "else rm -f /home/user/fail; fi; touch /dev/shm/started; exec sleep 100000"
    )
    ready = "test -e /dev/shm/started && test ! -e /home/user/fail"
    _admin("PUT", f"/admin/teams/{team}/templates/{team}-ready", {"spec": {"replicas": 0, "memoryMB": 256, "startCmd": start, "readyCmd": ready}})
    s = Sandbox.create(f"{team}-ready", api_key=key, timeout=3600)
    try:
        s.files.write("/home/user/work.txt", "before the pause")
        s.files.write("/home/user/fail-next", "x")
        assert s.pause(mode="filesystem")
        with pytest.raises(SandboxException) as exc:
            Sandbox.connect(s.sandbox_id, api_key=key)
        assert str(exc.value).startswith("409: ")
        assert "failed to resume: ReadyCommandFailed" in str(exc.value)
        assert "it is paused again with its files kept" in str(exc.value)
        assert Sandbox.get_info(s.sandbox_id, api_key=key).state == SandboxState.PAUSED
        back = Sandbox.connect(s.sandbox_id, api_key=key)
        assert back.files.read("/home/user/work.txt") == "before the pause"
    finally:
        Sandbox.kill(s.sandbox_id, api_key=key)
