"""Starts the whole local system once (scripts/system-for-tests.ts) and points the official e2b
Python SDK at it through the same three variables a user exports after `npm start`."""
import json
import os
import pathlib
import subprocess

import pytest
from e2b import Sandbox

ROOT = pathlib.Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def system():
    node = ROOT / "node_modules" / ".bin" / "node"
    proc = subprocess.Popen(
        [str(node), "scripts/system-for-tests.ts"],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=30)
        raise RuntimeError(f"system did not start (exit {proc.returncode})")
    info = json.loads(line)
    saved = {k: os.environ.get(k) for k in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY")}
    os.environ["E2B_API_URL"] = info["apiUrl"]
    os.environ["E2B_SANDBOX_URL"] = info["apiUrl"]
    os.environ["E2B_API_KEY"] = info["apiKey"]
    try:
        yield info
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        proc.stdin.close()
        proc.wait(timeout=60)


@pytest.fixture
def sbx(system):
    """A base sandbox for one test, killed after it (a module may define its own)."""
    s = Sandbox.create()
    yield s
    try:
        s.kill()
    except Exception:
        pass
