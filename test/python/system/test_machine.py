"""A base sandbox is a machine of its own, through the official e2b Python SDK (issue 11's list,
beside the JS SDK's e2e root-filesystem, root-inside and machine-files): files written and read
anywhere with parents made, `/` listed, owner names from the sandbox's own /etc/passwd, metadata as
user.e2b.* xattrs both ways, root through sudo inside while the host sees an unprivileged range,
a killed command gone at once and orphans reaped (no zombie)."""
import pytest
from e2b.exceptions import NotFoundException


def test_files_anywhere_owner_names_and_metadata(sbx):
    info = sbx.files.write("/opt/app/a.txt", "anywhere", metadata={"color": "blue"})
    assert info.path == "/opt/app/a.txt"
    assert sbx.files.read("/opt/app/a.txt") == "anywhere"
    assert {"opt", "etc", "home", "proc"} <= {e.name for e in sbx.files.list("/")}
    assert "Name:" in sbx.files.read("/proc/self/status")
    entry = sbx.files.get_info("/opt/app/a.txt")
    assert (entry.owner, entry.group) == ("user", "user")
    # Set inside, seen through the API; set through the API, seen inside.
    sbx.commands.run("python3 -c \"import os;os.setxattr('/opt/app/a.txt','user.e2b.size',b'XL')\"")
    assert sbx.files.get_info("/opt/app/a.txt").metadata == {"color": "blue", "size": "XL"}
    inside = sbx.commands.run("python3 -c \"import os;print(os.getxattr('/opt/app/a.txt','user.e2b.color').decode())\"")
    assert inside.stdout == "blue\n"
    with pytest.raises(NotFoundException):
        sbx.files.read("/opt/app/missing.txt")


def test_root_inside_only(sbx):
    r = sbx.commands.run("sudo id -u; sudo mount -t tmpfs none /mnt && sudo touch /mnt/x && echo mounted; awk '{print $1, $2}' /proc/self/uid_map")
    lines = r.stdout.splitlines()
    assert lines[0] == "0"
    assert lines[1] == "mounted"
    inside, outside = (int(x) for x in lines[2].split())
    assert inside == 0 and outside > 0  # uid 0 inside is an unprivileged uid on the host


def test_killed_command_is_gone_at_once(sbx):
    h = sbx.commands.run("sleep 600", background=True)
    assert sbx.commands.kill(h.pid)
    r = sbx.commands.run(f"kill -0 {h.pid} 2>/dev/null && echo alive || echo gone; ps -o pid= -p {h.pid} | wc -l")
    assert r.stdout == "gone\n0\n"


def test_orphans_are_reaped(sbx):
    # An orphan's parent is the sandbox's init, which reaps it when it exits: no zombie stays.
    sbx.commands.run("sh -c '(sleep 0.3 &); (sh -c \"sleep 0.3 & exit\" &); exit 0'")
    r = sbx.commands.run("sleep 1; ps -eo stat= | grep -c '^Z' || true")
    assert r.stdout == "0\n"


@pytest.mark.parametrize("user", ["user", "root"])
def test_files_in_dev_shm_and_run(sbx, user):
    # tmpfs of the host's user namespace (local driver README, "/dev/shm and /run"): before, every
    # create there answered 500 (EOVERFLOW), while a command could write.
    for d in ("/dev/shm", "/run"):
        sbx.files.write(f"{d}/py-{user}.txt", "hi\n", user=user)
        assert sbx.files.read(f"{d}/py-{user}.txt", user=user) == "hi\n"
        assert sbx.files.make_dir(f"{d}/py-dir-{user}", user=user)
        moved = sbx.files.rename(f"{d}/py-{user}.txt", f"{d}/py-dir-{user}/moved.txt", user=user)
        assert moved.path == f"{d}/py-dir-{user}/moved.txt"
        r = sbx.commands.run(f"stat -c '%U %G %a' {d}/py-dir-{user} {d}/py-dir-{user}/moved.txt; cat {d}/py-dir-{user}/moved.txt", user="root")
        assert r.stdout == f"{user} {user} 755\n{user} {user} 644\nhi\n"
