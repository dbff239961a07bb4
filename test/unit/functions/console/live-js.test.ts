// The console's live.js (functions/console/layout.tsx `LIVE_JS`) run in a fake page: a settable
// clock, a document whose visibility the test flips, and a fetch whose answers the test holds or
// releases. What an operator's tab does to the edge: one request per section at a time, none while
// hidden, fewer while failing.
import { runInNewContext } from "node:vm";
import { describe, expect, it } from "vitest";
import { LIVE_JS } from "../../../../functions/console/layout.tsx";

interface Request {
  url: string;
  at: number;
  answer(status: number, body?: string): Promise<void>;
}

function fakePage(sections: string[], opts: { hidden?: boolean } = {}) {
  let now = 0;
  let seq = 0;
  const timers = new Map<number, { at: number; fn: () => void; every?: number }>();
  const listeners: (() => void)[] = [];
  const requests: Request[] = [];
  const flush = async () => {
    for (let i = 0; i < 20; i++) await Promise.resolve();
  };
  const els = sections.map((src) => {
    const attrs: Record<string, string> = { "data-live": src };
    return { innerHTML: "", focused: false, getAttribute: (n: string) => attrs[n] ?? null, setAttribute: (n: string, v: string) => void (attrs[n] = v), contains(x: unknown) { return this.focused && x === focusedMarker; } };
  });
  const focusedMarker = {};
  const body = {};
  const document = {
    hidden: opts.hidden ?? false,
    body,
    get activeElement() {
      return els.some((e) => e.focused) ? focusedMarker : body;
    },
    querySelectorAll: (sel: string) => (sel === "[data-live]" ? els : []),
    addEventListener: (type: string, fn: () => void) => void (type === "visibilitychange" && listeners.push(fn)),
  };
  const location = { href: "/console" };
  const fetch = (url: string, init: { signal?: AbortSignal }) =>
    new Promise((resolve, reject) => {
      init.signal?.addEventListener("abort", () => reject(new Error("aborted")));
      requests.push({
        url,
        at: now,
        answer: async (status, text = "") => {
          resolve({ status, ok: status >= 200 && status < 300, text: () => Promise.resolve(text) });
          await flush();
        },
      });
    });
  const setTimeout = (fn: () => void, ms = 0) => (timers.set(++seq, { at: now + ms, fn }), seq);
  const setInterval = (fn: () => void, ms: number) => (timers.set(++seq, { at: now + ms, fn, every: ms }), seq);
  const clearTimeout = (id: number) => void timers.delete(id);
  runInNewContext(LIVE_JS, { document, location, fetch, setTimeout, setInterval, clearTimeout, clearInterval: clearTimeout, AbortController, Date: { now: () => now }, String, Math, Error, Array });
  return {
    els,
    requests,
    location,
    /** Moves the clock on by `ms`, running each timer due on the way (and the promises it settles). */
    async advance(ms: number) {
      const end = now + ms;
      for (;;) {
        const due = [...timers.entries()].filter(([, t]) => t.at <= end).sort((a, b) => a[1].at - b[1].at)[0];
        if (!due) break;
        const [id, t] = due;
        now = t.at;
        if (t.every) t.at += t.every;
        else timers.delete(id);
        t.fn();
        await flush();
      }
      now = end;
    },
    async setHidden(hidden: boolean) {
      document.hidden = hidden;
      for (const fn of listeners) fn();
      await flush();
    },
    of: (src: string) => requests.filter((r) => r.url === src),
  };
}

describe("live.js", () => {
  it("asks for a section again only after its previous answer: a held answer is one request", async () => {
    const page = fakePage(["/a"]);
    await page.advance(3000);
    expect(page.requests).toHaveLength(1);
    // Five periods pass with the answer held (below the 20 s give-up).
    await page.advance(15_000);
    expect(page.requests.map((r) => r.at)).toEqual([3000]);
    await page.requests[0]!.answer(200, "<p>fresh</p>");
    expect(page.els[0]!.innerHTML).toBe("<p>fresh</p>");
    await page.advance(2999);
    expect(page.requests).toHaveLength(1);
    await page.advance(1);
    expect(page.requests).toHaveLength(2);
  });

  it("each section waits only for its own answer", async () => {
    const page = fakePage(["/slow", "/fast"]);
    await page.advance(3000);
    for (let i = 0; i < 5; i++) {
      await page.of("/fast").at(-1)!.answer(200, "ok");
      await page.advance(3000);
    }
    expect(page.of("/slow")).toHaveLength(1);
    expect(page.of("/fast").map((r) => r.at)).toEqual([3000, 6000, 9000, 12000, 15000, 18000]);
  });

  it("gives up on an answer after 20 s, as a failure", async () => {
    const page = fakePage(["/a"]);
    await page.advance(3000);
    await page.advance(20_000);
    // Aborted at 23 s; a failure doubles the wait: the next request 6 s later.
    await page.advance(6000);
    expect(page.requests.map((r) => r.at)).toEqual([3000, 29_000]);
  });

  it("a hidden tab sends nothing; shown again, it asks at once", async () => {
    const page = fakePage(["/a"]);
    await page.setHidden(true);
    await page.advance(120_000);
    expect(page.requests).toHaveLength(0);
    await page.setHidden(false);
    await page.advance(0);
    expect(page.requests.map((r) => r.at)).toEqual([120_000]);
    // Hidden while a request is out: its answer schedules nothing until the tab is shown.
    await page.setHidden(true);
    await page.requests[0]!.answer(200, "x");
    await page.advance(60_000);
    expect(page.requests).toHaveLength(1);
  });

  it("a hidden tab at load sends nothing until shown", async () => {
    const page = fakePage(["/a"], { hidden: true });
    await page.advance(60_000);
    expect(page.requests).toHaveLength(0);
    await page.setHidden(false);
    await page.advance(0);
    expect(page.requests).toHaveLength(1);
  });

  it("backs off on errors, doubling up to a minute; a good answer brings back the 3 s period", async () => {
    const page = fakePage(["/a"]);
    await page.advance(3000);
    for (const [i, wait] of [6000, 12_000, 24_000, 48_000, 60_000, 60_000, 60_000].entries()) {
      await page.requests.at(-1)!.answer(i % 2 ? 502 : 500);
      await page.advance(wait - 1);
      expect(page.requests).toHaveLength(i + 1);
      await page.advance(1);
      expect(page.requests).toHaveLength(i + 2);
    }
    expect(page.els[0]!.innerHTML).toBe("");
    const last = page.requests.at(-1)!;
    await last.answer(200, "back");
    await page.advance(3000);
    expect(page.requests.at(-1)!.at - last.at).toBe(3000);
    expect(page.els[0]!.innerHTML).toBe("back");
  });

  it("leaves a section holding the focus alone, and sends a signed-out tab to the login form", async () => {
    const page = fakePage(["/a"]);
    await page.advance(3000);
    page.els[0]!.focused = true;
    await page.requests[0]!.answer(200, "replaced");
    expect(page.els[0]!.innerHTML).toBe("");
    page.els[0]!.focused = false;
    await page.advance(3000);
    await page.requests[1]!.answer(401, "sign in again");
    expect(page.location.href).toBe("/console/login");
  });
});
