"""The official Python e2b SDK driving the agent-runtime started standalone (main.ts).

The runtime serves the host as its one sandbox. A minimal control plane (the only fake, at the
boundary that belongs to another issue) answers the SDK's create/connect/kill and configures the
runtime through POST /init, as an orchestrator would: access token, env vars, default user `user`.
"""

import json
import os
import re
import secrets
import subprocess
import threading
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.request import Request, urlopen

import pytest
from e2b import Sandbox

ROOT = Path(__file__).resolve().parents[3]
NODE = ROOT / "node_modules" / "node" / "bin" / "node"
API_KEY = "e2b_" + "0" * 40
ENVD_VERSION = re.search(r'ENVD_VERSION = "([^"]+)"', (ROOT / "controllers/runtime/version.ts").read_text()).group(1)


def ensure_test_user():
    if subprocess.run(["id", "user"], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--create-home", "--home-dir", "/home/user", "--shell", "/bin/bash", "user"])
        subprocess.run(["id", "user"], check=True, capture_output=True)


class ControlPlane:
    def __init__(self, runtime_url: str):
        self.runtime_url = runtime_url
        self.token = None
        self.sandbox_id = None

    def init_runtime(self, env_vars):
        token = secrets.token_hex(16)
        body = {
            "accessToken": token,
            "envVars": env_vars,
            "defaultUser": "user",
            "defaultWorkdir": "/home/user",
            "timestamp": datetime.now(timezone.utc).isoformat(),
        }
        headers = {"content-type": "application/json"}
        if self.token:
            headers["x-access-token"] = self.token
        urlopen(Request(self.runtime_url + "/init", data=json.dumps(body).encode(), headers=headers, method="POST")).read()
        self.token = token

    def sandbox_json(self):
        return {"sandboxID": self.sandbox_id, "templateID": "base", "clientID": "test", "envdVersion": ENVD_VERSION, "envdAccessToken": self.token}


def make_handler(cp: ControlPlane):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def reply(self, status, body=None):
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            length = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}") if length else {}
            if self.path in ("/sandboxes", "/v2/sandboxes"):
                cp.sandbox_id = secrets.token_hex(10)
                cp.init_runtime(body.get("envVars") or {})
                return self.reply(201, cp.sandbox_json())
            if re.fullmatch(r"(/v2)?/sandboxes/\w+/connect", self.path):
                return self.reply(200, cp.sandbox_json())
            self.reply(404, {"code": 404, "message": "not found"})

        def do_DELETE(self):
            self.reply(404, {"code": 404, "message": "not found"}) if not cp.sandbox_id else (self.send_response(204), self.end_headers())

    return Handler


@pytest.fixture(scope="session")
def runtime_url():
    ensure_test_user()
    proc = subprocess.Popen(
        [str(NODE), "controllers/runtime/main.ts", "--port", "0", "--host", "127.0.0.1"],
        cwd=ROOT, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )
    line = proc.stdout.readline()
    match = re.search(r"listening on (http://\S+)", line)
    assert match, f"runtime did not start: {line!r}"
    yield match.group(1)
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="session")
def sandbox(runtime_url):
    cp = ControlPlane(runtime_url)
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(cp))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    api_url = f"http://127.0.0.1:{server.server_address[1]}"
    sbx = Sandbox.create("base", envs={"FOO": "bar"}, api_key=API_KEY, api_url=api_url, sandbox_url=runtime_url)
    yield sbx
    server.shutdown()


@pytest.fixture
def workdir(sandbox):
    path = f"/home/user/py-{secrets.token_hex(4)}"
    sandbox.files.make_dir(path)
    yield path
    sandbox.files.remove(path)
