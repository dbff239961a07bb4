// The operator console in a real headless Chromium (Debian's `chromium`, driven by puppeteer-core)
// against the whole system: sign in with the team's key through the form, the pages load, the
// sandboxes page and the quota match the E2B API, a kill from the console's button kills (the SDK
// no longer finds the sandbox), and the live section refreshes itself. Screenshots (desktop and a
// phone's viewport) go to test/artifacts/console/ (ignored by git), kept for a human to look at.
import { mkdirSync } from "node:fs";
import { existsSync } from "node:fs";
import { Sandbox } from "e2b";
import puppeteer, { type Browser, type Page } from "puppeteer-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../support/wait-for.ts";
import { e2b } from "./sdk.ts";

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

async function signIn(): Promise<void> {
  const { apiUrl, apiKey } = e2b();
  await page.goto(`${apiUrl}/console`);
  expect(new URL(page.url()).pathname).toBe("/console/login");
  await page.type("#key", apiKey);
  await Promise.all([page.waitForNavigation(), page.keyboard.press("Enter")]);
  expect(new URL(page.url()).pathname).toBe("/console");
  expect(page.url()).not.toContain(apiKey);
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
