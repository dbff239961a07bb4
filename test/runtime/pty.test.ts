import type { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startHarness, type Harness } from "./support/harness.ts";

let h: Harness;
let sbx: Sandbox;
beforeAll(async () => {
  h = await startHarness();
  sbx = await h.create();
});
afterAll(() => h?.close());

const decoder = () => {
  const d = new TextDecoder();
  let text = "";
  return { onData: (b: Uint8Array) => void (text += d.decode(b, { stream: true })), text: () => text };
};

describe("pty", () => {
  it("runs an interactive shell with the given env and exits 0", async () => {
    const out = decoder();
    const term = await sbx.pty.create({ cols: 80, rows: 24, envs: { ABC: "123" }, onData: out.onData });
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode("echo $ABC\nexit\n"));
    const r = await term.wait();
    expect(r.exitCode).toBe(0);
    expect(out.text()).toContain("123");
  });

  it("is a real terminal whose size follows resize", async () => {
    const out = decoder();
    const term = await sbx.pty.create({ cols: 80, rows: 24, onData: out.onData });
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode("tty; tput cols\n"));
    await expect.poll(() => out.text(), { timeout: 5000 }).toMatch(/\/dev\/pts\/\d+\s+80\s/);
    await sbx.pty.resize(term.pid, { cols: 100, rows: 24 });
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode("tput cols\n"));
    await expect.poll(() => out.text(), { timeout: 5000 }).toMatch(/\s100\s/);
    expect(await sbx.pty.kill(term.pid)).toBe(true);
    expect(await sbx.pty.kill(term.pid)).toBe(false);
  });

  it("disconnect and connect keep the pid and deliver new output", async () => {
    const term = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {} });
    await term.disconnect();
    const out = decoder();
    const again = await sbx.pty.connect(term.pid, { onData: out.onData });
    expect(again.pid).toBe(term.pid);
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode("echo reattached-$((40+2))\n"));
    await expect.poll(() => out.text(), { timeout: 5000 }).toContain("reattached-42");
    await again.kill();
  });
});
