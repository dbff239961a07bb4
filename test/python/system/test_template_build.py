"""Template builds through the official e2b Python SDK (`Template.build`, issue 12.1): the local
step kinds run in build sandboxes and land as RootfsStore layers; the same build again is served
from the cache, skip_cache rebuilds; a failing step raises BuildException with its output in the
logs. Files are read from the layers. A template built from_template inherits the parent's user,
workdir, env and start/ready commands. The installer steps (apt_install, pip_install, npm_install,
git_clone) fetch from the package mirror stand-in in a network namespace of this machine
(test/support/package-mirror-cli.ts), never a public host. set_start_cmd/set_ready_cmd: a sandbox of the template runs
the start command and is handed out once the ready command passes, or its create fails saying so."""
import json
import time
import os
import pathlib
import shutil
import subprocess
import tempfile
import uuid

import pytest
from e2b import Sandbox, Template, wait_for_file, wait_for_port
from e2b.exceptions import BuildException, SandboxException

ROOT = pathlib.Path(__file__).resolve().parents[3]
STORE = pathlib.Path(os.environ.get("SBX_ROOTFS_DIR") or pathlib.Path.home() / ".cache" / "sandbox-edge" / "rootfs")


def _layers(image):
    return json.loads((STORE / "templates" / f"{image}.json").read_text())["layers"]


def _built_file(image, path):
    for layer in reversed(_layers(image)):
        f = STORE / "layers" / layer / "rootfs" / path
        if f.exists():
            return f.read_text()
    return None


@pytest.fixture(scope="module")
def built(system):
    started = time.time() - 1
    images = []
    yield images
    for image in images:
        (STORE / "templates" / f"{image}.json").unlink(missing_ok=True)
    # Then every step layer made since the start that no template names (failed builds too).
    used = {l for t in (STORE / "templates").glob("*.json") for l in json.loads(t.read_text())["layers"]}
    for d in (STORE / "layers").glob("step-*"):
        if d.name not in used and d.stat().st_mtime >= started:
            shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def context():
    d = tempfile.mkdtemp(prefix="tpl-py-")
    pathlib.Path(d, "data.txt").write_text("from python\n")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _template(context, run):
    # The cache outlives a run (the seeded team keeps its id): RUN_ID makes this run's steps its own.
    return (
        Template(file_context_path=context)
        .from_base_image()
        .set_envs({"X": "y z", "RUN_ID": run})
        .copy("data.txt", "/home/user/data.txt")
        .run_cmd('cat /home/user/data.txt > /home/user/copy.txt && echo "$X" >> /home/user/copy.txt')
        .set_workdir("/srv")
        .set_user("root")
        .run_cmd("id -un > who.txt")
    )


def test_build_cache_and_skip_cache(context, built):
    run = uuid.uuid4().hex[:10]
    name = f"py-{run}"
    logs = []
    info = Template.build(_template(context, run), name, on_build_logs=logs.append)
    image = f"b-{info.build_id}"
    built.append(image)
    assert _built_file(image, "home/user/copy.txt") == "from python\ny z\n"
    assert _built_file(image, "srv/who.txt") == "root\n"
    assert not [l for l in logs if l.message.startswith("CACHED")]
    assert Template.exists(name)

    logs = []
    again = Template.build(_template(context, run), name, on_build_logs=logs.append)
    built.append(f"b-{again.build_id}")
    # copy, run, workdir, run: every step that makes a layer
    assert len([l for l in logs if l.message.startswith("CACHED")]) == 4

    logs = []
    forced = Template.build(_template(context, run), name, skip_cache=True, on_build_logs=logs.append)
    built.append(f"b-{forced.build_id}")
    assert not [l for l in logs if l.message.startswith("CACHED")]
    assert _built_file(f"b-{forced.build_id}", "srv/who.txt") == "root\n"


def test_failing_step(built):
    logs = []
    failing = Template().from_base_image().set_envs({"RUN_ID": uuid.uuid4().hex}).run_cmd("echo py-before-failure; exit 7")
    with pytest.raises(BuildException, match="exit code 7"):
        Template.build(failing, f"py-fail-{uuid.uuid4().hex[:8]}", on_build_logs=logs.append)
    assert "py-before-failure" in [l.message for l in logs]


def test_start_and_ready_commands(built):
    run = uuid.uuid4().hex[:10]
    name = f"py-start-{run}"
    server = (
        Template()
        .from_base_image()
        .set_envs({"RUN_ID": run})
        .set_workdir("/srv")
        .run_cmd("echo py-served > /srv/index.txt", user="root")
        .set_start_cmd("echo py-starting; sleep 2; exec python3 -u -m http.server 8001", wait_for_port(8001))
    )
    info = Template.build(server, name)
    built.append(f"b-{info.build_id}")
    sbx = Sandbox.create(name)
    try:
        # Handed out once the port listens: the first request needs no retry.
        assert sbx.commands.run("curl -sf http://127.0.0.1:8001/index.txt").stdout == "py-served\n"
    finally:
        sbx.kill()

    never = Template().from_base_image().set_envs({"RUN_ID": run}).set_start_cmd("sleep infinity", "false")
    info = Template.build(never, f"{name}-never")
    built.append(f"b-{info.build_id}")
    with pytest.raises(SandboxException, match="ready command did not pass"):
        Sandbox.create(f"{name}-never")


@pytest.fixture(scope="module")
def mirror():
    tag = uuid.uuid4().hex[:10]
    node = ROOT / "node_modules" / ".bin" / "node"
    proc = subprocess.Popen([str(node), "test/support/package-mirror-cli.ts", tag], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=30)
        raise RuntimeError(f"the package mirror did not start (exit {proc.returncode})")
    try:
        yield {**json.loads(line), "tag": tag}
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def _every_step(context, m):
    source = m["aptSource"]
    return (
        Template(file_context_path=context)
        .from_base_image()
        # pip as root into Debian's python: PIP_BREAK_SYSTEM_PACKAGES covers a base that still has
        # Debian's PEP 668 mark and is a no-op on one without it.
        .set_envs({"RUN_ID": m["tag"], "PIP_INDEX_URL": m["pipIndex"], "PIP_TRUSTED_HOST": m["ip"], "PIP_BREAK_SYSTEM_PACKAGES": "1", "PIP_NO_CACHE_DIR": "1",
                   "NPM_CONFIG_REGISTRY": m["npmRegistry"], "NPM_CONFIG_AUDIT": "false", "NPM_CONFIG_FUND": "false", "NPM_CONFIG_UPDATE_NOTIFIER": "false"})
        # Only the mirror: base's own sources (a public archive) are moved out of apt's way.
        .run_cmd(f'mkdir -p /root/apt-sources && mv /etc/apt/sources.list /etc/apt/sources.list.d/* /root/apt-sources/ 2>/dev/null; echo "{source}" > /etc/apt/sources.list.d/mirror.list', user="root")
        .apt_install([m["deb"]])
        .pip_install([m["wheel"]])
        .copy("data.txt", "/home/user/data.txt")
        .set_workdir("/home/user/app")
        .npm_install([m["npm"]])
        .git_clone(m["repo"], "/home/user/cloned")
        .set_user("user")
        .run_cmd("id -un > /home/user/app/who.txt")
    )


def test_every_step_kind_from_the_mirror_cached_then_a_sandbox(context, built, mirror):
    m = mirror
    tag, deb, wheel, npm = m["tag"], m["deb"], m["wheel"], m["npm"]
    name = f"py-all-{tag}"
    logs = []
    info = Template.build(_every_step(context, m), name, on_build_logs=logs.append)
    built.append(f"b-{info.build_id}")
    text = "\n".join(l.message for l in logs)
    assert f"Setting up {deb} (1.4)" in text
    assert f"Successfully installed {wheel}-0.3" in text
    assert not [l for l in logs if l.message.startswith("CACHED")]

    logs = []
    again = Template.build(_every_step(context, m), name, on_build_logs=logs.append)
    built.append(f"b-{again.build_id}")
    # run (sources), apt, pip, copy, workdir, npm, git, run: every step that makes a layer
    assert len([l for l in logs if l.message.startswith("CACHED")]) == 8
    assert "Setting up" not in "\n".join(l.message for l in logs)

    sbx = Sandbox.create(name)
    try:
        out = sbx.commands.run(
            f"{deb} && cd / && python3 -c 'import {wheel}; print({wheel}.VALUE)'"
            f" && cd /home/user/app && node -e 'console.log(require(\"{npm}\"))'"
            " && cat /home/user/cloned/README.md /home/user/data.txt /home/user/app/who.txt && whoami"
        ).stdout
        assert out == f"deb {tag} as user\nwheel {tag}\nnpm {tag}\ngit {tag}\nfrom python\nuser\nuser\n"
    finally:
        sbx.kill()


def test_failing_installer_step_logs_its_output(built, mirror):
    m = mirror
    tag, source = m["tag"], m["aptSource"]
    missing = f"no-such-package-{tag}"
    failing = (
        Template()
        .from_base_image()
        .set_envs({"RUN_ID": uuid.uuid4().hex})
        .run_cmd(f'rm -f /etc/apt/sources.list; rm -rf /etc/apt/sources.list.d/*; echo "{source}" > /etc/apt/sources.list.d/mirror.list', user="root")
        .apt_install([missing])
    )
    logs = []
    with pytest.raises(BuildException, match="exit code 100"):
        Template.build(failing, f"py-fail-apt-{tag}", on_build_logs=logs.append)
    assert f"E: Unable to locate package {missing}" in [l.message for l in logs]


def test_from_template_inherits_the_parents_user_workdir_env_and_start_command(built):
    """The JS e2e `template-parents` case through the Python SDK: a child built `from_template`
    runs its steps, its sandboxes' commands and the inherited start command as the parent's user,
    in its workdir, with its env; a child's own start command replaces the parent's."""
    run = uuid.uuid4().hex[:10]
    parent = f"py-parent-{run}"
    line = 'echo "$PARENT_VAR $(id -un) $(pwd)"'
    info = Template.build(
        Template()
        .from_base_image()
        .set_envs({"RUN_ID": run, "PARENT_VAR": "from-the-parent"})
        .run_cmd("useradd -m -s /bin/bash worker && mkdir -p /srv/app && chown worker /srv/app", user="root")
        .set_user("worker")
        .set_workdir("/srv/app")
        .set_start_cmd(f"{line} > /tmp/parent-started; sleep infinity", wait_for_file("/tmp/parent-started")),
        parent,
    )
    built.append(f"b-{info.build_id}")
    # No user, workdir, env or start command of its own.
    info = Template.build(Template().from_template(parent).run_cmd(f"{line} > step.txt"), f"{parent}-child")
    built.append(f"b-{info.build_id}")
    sbx = Sandbox.create(f"{parent}-child")
    try:
        r = sbx.commands.run(f"{line}; cat /srv/app/step.txt /tmp/parent-started")
        assert r.stdout == "from-the-parent worker /srv/app\n" * 3
    finally:
        sbx.kill()

    info = Template.build(
        Template()
        .from_template(parent)
        .set_envs({"CHILD_VAR": "own"})
        .set_start_cmd('echo "$CHILD_VAR $PARENT_VAR" > /tmp/child-started; sleep infinity', wait_for_file("/tmp/child-started")),
        f"{parent}-own",
    )
    built.append(f"b-{info.build_id}")
    own = Sandbox.create(f"{parent}-own")
    try:
        r = own.commands.run("cat /tmp/child-started; test -e /tmp/parent-started && echo parent-started-too; id -un; pwd")
        assert r.stdout == "own from-the-parent\nworker\n/srv/app\n"
    finally:
        own.kill()
