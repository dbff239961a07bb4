"""A sandbox killed while a command streams (issue 11.6), through the official e2b Python SDK
(sync and async): the data plane ends the stream as E2B's proxy does, with a transport error, so
the SDK probes the sandbox's health, hears the proxy's 502 "not found", and raises its
SandboxNotRunningException ("killed or reached its end of life") rather than a Connect error."""
import asyncio
import threading

import pytest
from e2b import AsyncSandbox, Sandbox
from e2b.exceptions import SandboxNotRunningException


def test_killed_while_streaming_raises_not_running(system):
    s = Sandbox.create()
    seen = threading.Event()
    handle = s.commands.run(
        "while true; do echo tick; sleep 0.2; done",
        background=True,
        on_stdout=lambda _line: seen.set(),
    )
    killer = threading.Thread(target=lambda: (seen.wait(30), Sandbox.kill(s.sandbox_id)))
    killer.start()
    with pytest.raises(SandboxNotRunningException) as exc:
        handle.wait()
    killer.join()
    assert "killed or reached its end of life" in str(exc.value)


def test_killed_while_streaming_async(system):
    async def run():
        s = await AsyncSandbox.create()
        seen = asyncio.Event()

        async def on_stdout(_line):
            seen.set()

        handle = await s.commands.run("while true; do echo tick; sleep 0.2; done", background=True, on_stdout=on_stdout)
        await asyncio.wait_for(seen.wait(), 30)
        await AsyncSandbox.kill(s.sandbox_id)
        with pytest.raises(SandboxNotRunningException) as exc:
            await handle.wait()
        assert "killed or reached its end of life" in str(exc.value)

    asyncio.run(run())
