// writeIdentity runs as the host's root over a sandbox's new root, whose tree its template's build
// steps (or a snapshot of a sandbox) shaped: a link there must never be followed. A build step
// `ln -sf /etc/shadow /etc/hostname` made the agent overwrite the host's file.
import { lstatSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, expect, it } from "vitest";
import { writeIdentity } from "../../../../controllers/drivers/local/root-overlay.ts";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
function scratch(): { merged: string; host: string } {
  const d = mkdtempSync(join(tmpdir(), "identity-"));
  dirs.push(d);
  mkdirSync(join(d, "merged"));
  mkdirSync(join(d, "host"));
  return { merged: join(d, "merged"), host: join(d, "host") };
}

it("replaces links at /etc/hostname, /etc/hosts and /etc/resolv.conf with files of its own; their targets stay as they were", () => {
  const { merged, host } = scratch();
  mkdirSync(join(merged, "etc"));
  for (const name of ["hostname", "hosts", "resolv.conf"]) {
    writeFileSync(join(host, name), "the host's own\n");
    symlinkSync(join(host, name), join(merged, "etc", name));
  }
  writeIdentity(merged, "sbx-identity");
  for (const name of ["hostname", "hosts", "resolv.conf"]) {
    expect(readFileSync(join(host, name), "utf8")).toBe("the host's own\n");
    expect(lstatSync(join(merged, "etc", name)).isFile()).toBe(true);
  }
  expect(readFileSync(join(merged, "etc/hostname"), "utf8")).toBe("sbx-identity\n");
  expect(readFileSync(join(merged, "etc/hosts"), "utf8")).toContain("127.0.1.1\tsbx-identity");
});

it("an /etc that is a link to a host directory is replaced by a directory of its own; nothing is written there", () => {
  const { merged, host } = scratch();
  writeFileSync(join(host, "keep"), "the host's own\n");
  symlinkSync(host, join(merged, "etc"));
  writeIdentity(merged, "sbx-identity");
  // The link went, not what it pointed at.
  expect(readFileSync(join(host, "keep"), "utf8")).toBe("the host's own\n");
  expect(lstatSync(join(merged, "etc")).isDirectory()).toBe(true);
  expect(readFileSync(join(merged, "etc/hostname"), "utf8")).toBe("sbx-identity\n");
  expect(() => readlinkSync(join(merged, "etc"))).toThrow();
  expect(() => lstatSync(join(host, "hostname"))).toThrow();
});

it("a directory where a file goes is refused, naming it, and left as it is: its tree is the tenant's (any depth or size), never deleted on the agent's thread", () => {
  const { merged } = scratch();
  mkdirSync(join(merged, "etc/hosts"), { recursive: true });
  writeFileSync(join(merged, "etc/hosts/inside"), "x");
  writeFileSync(join(merged, "etc/hostname"), "the template's\n");
  expect(() => writeIdentity(merged, "sbx-identity")).toThrow(expect.objectContaining({ name: "TerminalError", reason: "InvalidImage", message: expect.stringMatching(/^\/etc\/hosts is a directory in this sandbox's root .*: it must be a file$/) }));
  expect(readFileSync(join(merged, "etc/hosts/inside"), "utf8")).toBe("x");
  // Refused before anything was written.
  expect(readFileSync(join(merged, "etc/hostname"), "utf8")).toBe("the template's\n");
});
