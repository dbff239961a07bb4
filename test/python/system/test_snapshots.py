"""Snapshots and fork through the official e2b Python SDK (sync) against the whole system:
create_snapshot with a name, sandboxes from it see its files as they were, list_snapshots per
sandbox and by name, fork (instance and static), delete_snapshot."""
import uuid

from e2b import Sandbox


def _kill(*sandboxes):
    for s in sandboxes:
        try:
            s.kill()
        except Exception:
            pass


def test_snapshot_create_from_list_fork_delete(system):
    name = "py-" + uuid.uuid4().hex[:12]
    src = Sandbox.create()
    made = [src]
    try:
        src.files.write("/home/user/a.txt", "one")
        snap = src.create_snapshot(name=name)
        assert snap.snapshot_id.endswith(f"/{name}:default")
        assert snap.names == [snap.snapshot_id]
        src.files.write("/home/user/a.txt", "two")
        src.files.write("/home/user/b.txt", "later")

        copies = [Sandbox.create(snap.snapshot_id), Sandbox.create(name)]
        made += copies
        assert len({c.sandbox_id for c in copies + [src]}) == 3
        for c in copies:
            assert c.files.read("/home/user/a.txt") == "one"
            assert not c.files.exists("/home/user/b.txt")
            assert c.commands.run("cat /proc/sys/kernel/hostname").stdout == f"{c.sandbox_id}\n"

        listed = Sandbox.list_snapshots(sandbox_id=src.sandbox_id).next_items()
        assert [s.snapshot_id for s in listed] == [snap.snapshot_id]
        assert [s.snapshot_id for s in Sandbox.list_snapshots(name=name).next_items()] == [snap.snapshot_id]
        assert [s.snapshot_id for s in src.list_snapshots().next_items()] == [snap.snapshot_id]

        forks = src.fork() + Sandbox.fork(src.sandbox_id, count=1)
        assert len(forks) == 2
        for f in forks:
            assert isinstance(f, Sandbox), f
            made.append(f)
            assert f.files.read("/home/user/b.txt") == "later"
        assert src.is_running()

        assert Sandbox.delete_snapshot(snap.snapshot_id) is True
        assert Sandbox.delete_snapshot(snap.snapshot_id) is False
        assert Sandbox.list_snapshots(sandbox_id=src.sandbox_id).next_items() == []
        assert copies[0].files.read("/home/user/a.txt") == "one"
    finally:
        _kill(*made)
