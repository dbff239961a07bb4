import io
import os
import time

import pytest
from e2b import FileNotFoundException, FilesystemEventType
from e2b.sandbox.commands.command_handle import PtySize


def test_write_read_text_and_bytes(sandbox, workdir):
    info = sandbox.files.write(f"{workdir}/a.txt", "hello")
    assert (info.name, info.path) == ("a.txt", f"{workdir}/a.txt")
    assert sandbox.files.read(f"{workdir}/a.txt") == "hello"
    data = os.urandom(300_000)
    sandbox.files.write(f"{workdir}/b.bin", data)
    assert bytes(sandbox.files.read(f"{workdir}/b.bin", format="bytes")) == data


def test_write_file_object_uses_octet_stream(sandbox, workdir):
    sandbox.files.write(f"{workdir}/stream.txt", io.BytesIO(b"from a file object"))
    assert sandbox.files.read(f"{workdir}/stream.txt") == "from a file object"


def test_gzip_both_ways(sandbox, workdir):
    text = "zip " * 5000
    sandbox.files.write(f"{workdir}/gz.txt", text, gzip=True)
    assert sandbox.files.read(f"{workdir}/gz.txt", gzip=True) == text


def test_relative_paths_resolve_under_home(sandbox, workdir):
    rel = workdir.removeprefix("/home/user/") + "/rel.txt"
    assert sandbox.files.write(rel, "r").path == f"{workdir}/rel.txt"


def test_missing_file(sandbox, workdir):
    with pytest.raises(FileNotFoundException):
        sandbox.files.read(f"{workdir}/missing.txt")
    assert sandbox.files.exists(f"{workdir}/missing.txt") is False


def test_list_make_dir_rename_remove(sandbox, workdir):
    sandbox.files.write(f"{workdir}/l/file1.txt", "abcd")
    assert sandbox.files.make_dir(f"{workdir}/l/sub") is True
    assert sandbox.files.make_dir(f"{workdir}/l/sub") is False
    sandbox.files.write(f"{workdir}/l/sub/x.txt", "x")
    entries = sandbox.files.list(f"{workdir}/l", depth=2)
    assert [e.path for e in entries] == [f"{workdir}/l/file1.txt", f"{workdir}/l/sub", f"{workdir}/l/sub/x.txt"]
    f = entries[0]
    assert (f.size, f.mode, f.permissions, f.owner, f.group) == (4, 0o644, "-rw-r--r--", "user", "user")
    moved = sandbox.files.rename(f"{workdir}/l/file1.txt", f"{workdir}/l/moved.txt")
    assert moved.path == f"{workdir}/l/moved.txt"
    sandbox.files.remove(f"{workdir}/l/moved.txt")
    sandbox.files.remove(f"{workdir}/l/moved.txt")
    assert sandbox.files.exists(f"{workdir}/l/moved.txt") is False


def test_watch_dir_polling(sandbox, workdir):
    handle = sandbox.files.watch_dir(workdir)
    sandbox.files.write(f"{workdir}/watched.txt", "w")
    events = []
    deadline = time.time() + 3
    while time.time() < deadline and not any(e.name == "watched.txt" and e.type == FilesystemEventType.WRITE for e in events):
        events += handle.get_new_events()
        time.sleep(0.1)
    handle.stop()
    assert any(e.name == "watched.txt" and e.type == FilesystemEventType.WRITE for e in events)


def test_pty(sandbox):
    out = bytearray()
    term = sandbox.pty.create(PtySize(rows=24, cols=80), envs={"ABC": "123"})
    sandbox.pty.send_stdin(term.pid, b"echo $ABC\nexit\n")
    result = term.wait(on_pty=lambda data: out.extend(data))
    assert result.exit_code == 0
    assert b"123" in out
