"""Template builds through the official e2b Python SDK (`Template.build`, issue 12.1): the local
step kinds run in build sandboxes and land as RootfsStore layers; the same build again is served
from the cache, skip_cache rebuilds; a failing step raises BuildException with its output in the
logs. Files are read from the layers. set_start_cmd/set_ready_cmd: a sandbox of the template runs
the start command and is handed out once the ready command passes, or its create fails saying so."""
import json
import time
import os
import pathlib
import shutil
import tempfile
import uuid

import pytest
from e2b import Sandbox, Template, wait_for_port
from e2b.exceptions import BuildException, SandboxException

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
