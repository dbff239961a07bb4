// The operator console in a real headless Chromium (Debian's `chromium`, driven by puppeteer-core)
// against the whole system: sign in with the team's key through the form, the pages load, the
// sandboxes page and the quota match the E2B API, a kill from the console's button kills (the SDK
// no longer finds the sandbox), and the live section refreshes itself, never asking again while
// its previous answer is outstanding nor from a hidden tab. A team key's console shows its team
// only; Sign out ends the session on the server. Accessibility is measured by axe-core run in the
// page (WCAG 2 A/AA rules, colour contrast among them: no violation; the lowest text contrast is
// printed) and by keyboard: Tab from the top reaches every control in order, each with a visible
// focus ring. Screenshots (desktop and a phone's viewport) go to test/artifacts/console/ (ignored
// by git).
import { mkdirSync, readFileSync } from "node:fs";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { Sandbox } from "e2b";
import puppeteer, { type Browser, type HTTPRequest, type Page } from "puppeteer-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../support/wait-for.ts";
import { e2b, uniqueTag } from "./sdk.ts";

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
const ARTIFACTS = "test/artifacts/console";

let browser: Browser;
let page: Page;

async function shot(name: string): Promise<void> {
  await page.screenshot({ path: `${ARTIFACTS}/${name}.png`, fullPage: true });
}

beforeAll(async () => {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: apt-get install chromium (.ci/run does)`);
  mkdirSync(ARTIFACTS, { recursive: true });
  // --no-sandbox: the tests run as root, where Chromium's own sandbox refuses to start.
  browser = await puppeteer.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"] });
  page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 900 });
}, 60_000);
afterAll(async () => {
  await browser?.close();
});

/** Signs `on` in through the login form with `key` (the admin key unless given). */
async function signIn(on: Page = page, key = e2b().apiKey): Promise<void> {
  await on.goto(`${e2b().apiUrl}/console`);
  expect(new URL(on.url()).pathname).toBe("/console/login");
  await on.type("#key", key);
  await Promise.all([on.waitForNavigation(), on.keyboard.press("Enter")]);
  expect(new URL(on.url()).pathname).toBe("/console");
  expect(on.url()).not.toContain(key);
}

/** axe-core's WCAG 2 A/AA rules over the page: the violations, and the lowest text contrast it measured. */
async function axe(on: Page = page): Promise<{ violations: { id: string; nodes: string[] }[]; minContrast: number }> {
  const source = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");
  // Evaluated over the DevTools protocol, which the page's CSP (only /console/live.js may run) does not govern.
  await on.evaluate(source);
  return on.evaluate(async () => {
    const r = await (window as unknown as { axe: { run: (ctx: Document, o: object) => Promise<any> } }).axe.run(document, { runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"] }, resultTypes: ["violations", "passes"] });
    const ratios = (r.passes as any[]).filter((p) => p.id === "color-contrast").flatMap((p) => p.nodes.map((n: any) => n.any[0]?.data?.contrastRatio as number)).filter((x) => typeof x === "number");
    return { violations: (r.violations as any[]).map((v) => ({ id: v.id, nodes: v.nodes.map((n: any) => String(n.target)) })), minContrast: ratios.length ? Math.min(...ratios) : NaN };
  });
}

/** Tabs from the top of the page: each control it reaches (in order) and which showed no focus ring. */
async function tabThrough(on: Page = page): Promise<{ reached: string[]; controls: string[]; unringed: string[] }> {
  const controls = await on.$$eval("a[href], button, input:not([type=hidden]), select", (els) =>
    els.map((el) => `${el.tagName.toLowerCase()}|${el.getAttribute("href") ?? el.getAttribute("name") ?? ""}|${el.getAttribute("aria-label") ?? el.textContent?.trim() ?? ""}`),
  );
  await on.evaluate(() => (document.activeElement as HTMLElement | null)?.blur());
  const reached: string[] = [];
  const unringed: string[] = [];
  for (let i = 0; i < controls.length; i++) {
    await on.keyboard.press("Tab");
    const [name, ringed] = await on.evaluate(() => {
      const el = document.activeElement as HTMLElement;
      const st = getComputedStyle(el);
      const d = `${el.tagName.toLowerCase()}|${el.getAttribute("href") ?? el.getAttribute("name") ?? ""}|${el.getAttribute("aria-label") ?? el.textContent?.trim() ?? ""}`;
      return [d, st.outlineStyle !== "none" && parseFloat(st.outlineWidth) >= 2] as const;
    });
    reached.push(name);
    if (!ringed) unringed.push(name);
  }
  return { reached, controls, unringed };
}

const rowIds = () => page.$$eval("tr[data-sandbox]", (rows) => rows.map((r) => r.getAttribute("data-sandbox")));

describe("the console in Chromium", () => {
  it("signs in, shows the API's sandboxes and quota, and kills a sandbox from its button", async () => {
    const { apiUrl } = e2b();
    const keep = await Sandbox.create(e2b());
    const victim = await Sandbox.create(e2b());
    try {
      await signIn();
      expect(await page.$eval("h1", (h) => h.textContent)).toBe("Overview");
      expect(await page.$$("tr[data-template]")).not.toHaveLength(0);
      const running = (await Sandbox.list(e2b()).nextItems()).length;
      const quotaCell = await page.$eval("tr[data-team] td[data-field=running]", (td) => td.textContent ?? "");
      expect(Number(quotaCell.split(" ")[0])).toBe(running);
      await shot("overview");

      await page.goto(`${apiUrl}/console/sandboxes?state=running`);
      const apiIds = (await Sandbox.list(e2b()).nextItems()).map((s) => s.sandboxId).sort();
      expect((await rowIds()).sort()).toEqual(apiIds);
      expect(apiIds).toEqual(expect.arrayContaining([keep.sandboxId, victim.sandboxId]));
      await shot("sandboxes");

      // The timeline of one sandbox: started, and the agent's phase change to Running.
      await page.goto(`${apiUrl}/console/sandboxes/${keep.sandboxId}`);
      const timeline = await page.$eval("ol.timeline", (ol) => ol.textContent ?? "");
      expect(timeline).toContain("started");
      expect(timeline).toMatch(/phase.*Running/);
      await shot("timeline");

      // Kill with the keyboard: focus the victim's button and press Enter.
      await page.goto(`${apiUrl}/console/sandboxes?state=running`);
      await page.focus(`button[aria-label="Kill sandbox ${victim.sandboxId}"]`);
      await Promise.all([page.waitForNavigation(), page.keyboard.press("Enter")]);
      expect(await page.$eval("[role=status]", (p) => p.textContent)).toContain(victim.sandboxId);
      await waitFor(async () => !(await Sandbox.list(e2b()).nextItems()).some((s) => s.sandboxId === victim.sandboxId));
      await expect(Sandbox.getInfo(victim.sandboxId, e2b())).rejects.toThrow();
      expect(await Sandbox.getInfo(keep.sandboxId, e2b())).toMatchObject({ sandboxId: keep.sandboxId });
      expect(await rowIds()).not.toContain(victim.sandboxId);
      await shot("after-kill");
    } finally {
      await keep.kill().catch(() => {});
      await victim.kill().catch(() => {});
    }
  });

  it("refreshes the sandboxes list in place when the API changes it (live update)", async () => {
    const { apiUrl } = e2b();
    await page.goto(`${apiUrl}/console/sandboxes?state=running`);
    const late = await Sandbox.create(e2b());
    try {
      await page.waitForSelector(`tr[data-sandbox="${late.sandboxId}"]`, { timeout: 20_000 });
      await late.kill();
      await page.waitForSelector(`tr[data-sandbox="${late.sandboxId}"]`, { hidden: true, timeout: 20_000 });
    } finally {
      await late.kill().catch(() => {});
    }
  });

  it("asks for a live section again only after its previous answer (none while one is held), and not at all from a hidden tab", async () => {
    const { apiUrl } = e2b();
    await page.goto(`${apiUrl}/console/sandboxes?state=running`);
    const held: HTTPRequest[] = [];
    const hold = (req: HTTPRequest) => {
      if (new URL(req.url()).searchParams.get("fragment") === "list") held.push(req);
      else void req.continue();
    };
    await page.setRequestInterception(true);
    page.on("request", hold);
    try {
      await waitFor(async () => held.length >= 1 || undefined, { what: "the first poll" });
      // Three and more periods (3 s each) pass with the answer held: the edge is asked once.
      await new Promise((r) => setTimeout(r, 10_000));
      expect(held).toHaveLength(1);
      await held[0]!.continue();
      await waitFor(async () => held.length >= 2 || undefined, { what: "the next poll once the first was answered" });
    } finally {
      page.off("request", hold);
      for (const req of held.slice(1)) await req.continue().catch(() => {});
      await page.setRequestInterception(false);
    }
    // Behind another tab it asks nothing; brought back, it asks at once (not a period later).
    let asked = 0;
    const count = (req: HTTPRequest) => void (new URL(req.url()).searchParams.get("fragment") === "list" && asked++);
    page.on("request", count);
    const other = await browser.newPage();
    try {
      await other.bringToFront();
      expect(await page.evaluate(() => document.hidden)).toBe(true);
      await new Promise((r) => setTimeout(r, 500)); // a request sent just before the switch is seen
      const before = asked;
      await new Promise((r) => setTimeout(r, 7000));
      expect(asked).toBe(before);
      await page.bringToFront();
      await waitFor(async () => asked > before || undefined, { timeoutMs: 2000, what: "a poll as soon as the tab is shown" });
    } finally {
      page.off("request", count);
      await other.close();
    }
  });

  it("passes axe-core's WCAG 2 A/AA rules (contrast included) on every page; Tab reaches every control in order with a focus ring", async () => {
    const { apiUrl } = e2b();
    const sbx = await Sandbox.create(e2b());
    try {
      for (const path of ["/console", "/console/sandboxes?state=all", `/console/sandboxes/${sbx.sandboxId}`, "/console/ops"]) {
        await page.goto(`${apiUrl}${path}`);
        const a = await axe();
        expect({ path, violations: a.violations }).toEqual({ path, violations: [] });
        expect(a.minContrast).toBeGreaterThanOrEqual(4.5);
        console.log(`axe ${path}: no violations; lowest text contrast ${a.minContrast}:1`);
        const tab = await tabThrough();
        expect(tab.reached).toEqual(tab.controls);
        expect(tab.unringed).toEqual([]);
        expect(tab.reached[0]).toMatch(/^a\|#main\|Skip to content/);
      }
      // The skip link takes the keyboard past the navigation: the focus is in the page's main part,
      // and the next Tab reaches the first control there (the sandboxes page's state filter).
      await page.goto(`${apiUrl}/console/sandboxes`);
      await page.keyboard.press("Tab");
      await page.keyboard.press("Enter");
      expect(await page.evaluate(() => document.activeElement?.id)).toBe("main");
      await page.keyboard.press("Tab");
      expect(await page.evaluate(() => document.activeElement?.getAttribute("name"))).toBe("state");
    } finally {
      await sbx.kill().catch(() => {});
    }
  });

  it("a team key's console shows its team only: its sandboxes, no clusters, another team's sandbox a 404, ops refused", async () => {
    const { apiUrl, apiKey } = e2b();
    const teamName = uniqueTag();
    const created = await fetch(`${apiUrl}/api-keys`, { method: "POST", headers: { "x-api-key": apiKey, "content-type": "application/json" }, body: JSON.stringify({ name: "console", teamName }) });
    const teamKey = ((await created.json()) as { key: string }).key;
    const mine = await Sandbox.create({ ...e2b(), apiKey: teamKey });
    const admins = await Sandbox.create(e2b());
    const context = await browser.createBrowserContext();
    const tab = await context.newPage();
    try {
      await signIn(tab, teamKey);
      expect(await tab.$("#clusters")).toBeNull();
      expect(await tab.$$eval("tr[data-team]", (rows) => rows.map((r) => r.getAttribute("data-team")))).toEqual([teamName]);
      await tab.goto(`${apiUrl}/console/sandboxes?state=all`);
      expect(await tab.$$eval("tr[data-sandbox]", (rows) => rows.map((r) => r.getAttribute("data-sandbox")))).toEqual([mine.sandboxId]);
      const other = await tab.goto(`${apiUrl}/console/sandboxes/${admins.sandboxId}`);
      expect(other?.status()).toBe(404);
      const ops = await tab.goto(`${apiUrl}/console/ops`);
      expect(ops?.status()).toBe(403);
      await tab.screenshot({ path: `${ARTIFACTS}/team-forbidden-ops.png`, fullPage: true });
    } finally {
      await context.close();
      await mine.kill().catch(() => {});
      await admins.kill().catch(() => {});
    }
  });

  it("Sign out ends the session: the cookie the browser held, replayed from elsewhere, is refused", async () => {
    const { apiUrl } = e2b();
    const context = await browser.createBrowserContext();
    const tab = await context.newPage();
    try {
      await signIn(tab);
      const session = (await context.cookies()).find((c) => c.name === "console_session");
      expect(session).toBeDefined();
      const replay = () => fetch(`${apiUrl}/console`, { headers: { cookie: `console_session=${session!.value}` }, redirect: "manual" });
      expect((await replay()).status).toBe(200);
      await Promise.all([tab.waitForNavigation(), tab.click("header form button[type=submit]")]);
      expect(new URL(tab.url()).pathname).toBe("/console/login");
      const after = await replay();
      expect(after.status).toBe(303);
      expect(after.headers.get("location")).toBe("/console/login");
    } finally {
      await context.close();
    }
  });

  it("is usable on a phone: no sideways scroll of the page, the table scrolls in its own box", async () => {
    const { apiUrl } = e2b();
    await page.setViewport({ width: 390, height: 844, isMobile: true, hasTouch: true });
    await page.goto(`${apiUrl}/console`);
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    expect(overflow).toBeLessThanOrEqual(0);
    await shot("overview-phone");
    await page.goto(`${apiUrl}/console/sandboxes`);
    await shot("sandboxes-phone");
    // Every form control has a label a screen reader reads.
    const unlabeled = await page.$$eval("input:not([type=hidden]), select", (els) => els.filter((e) => !(e as HTMLInputElement).labels?.length).length);
    expect(unlabeled).toBe(0);
  });
});
