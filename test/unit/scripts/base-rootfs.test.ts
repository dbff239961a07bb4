// The base build's progress lines (the builder's log and what npm start shows of it while it
// builds `base` in the background): mmdebstrap's stages and a count of configured packages, not
// its many lines per package; an empty store is "not built" and a built one needs no builder.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect, it } from "vitest";
import { buildBaseInBackground, progressLine } from "../../../scripts/lib/base-rootfs.ts";
import { buildLogLine } from "../../../controllers/drivers/local/rootfs/build-base.ts";
import { RootfsStore } from "../../../controllers/drivers/local/rootfs/store.ts";

it("the builder logs mmdebstrap's stages, warnings and errors, and every 50th unpacked and configured package; not apt's and dpkg's other lines", () => {
  const state = { unpacked: 0, configured: 0 };
  const lines = [
    "I: downloading packages with apt...",
    "Get:1 http://deb.debian.org/debian bookworm/main amd64 libc6 amd64 2.36-9 [2757 kB]",
    ...Array.from({ length: 60 }, (_, i) => [`Preparing to unpack .../pkg${i}_1.0_amd64.deb ...`, `Unpacking pkg${i} (1.0) ...`]).flat(),
    ...Array.from({ length: 120 }, (_, i) => `Setting up pkg${i} (1.0) ...`),
    "W: a warning",
    "E: apt-get failed",
  ];
  expect(lines.map((l) => buildLogLine(l, state)).filter((l) => l !== undefined)).toEqual([
    "mmdebstrap: I: downloading packages with apt...",
    "unpacked 50 packages",
    "configured 50 packages",
    "configured 100 packages",
    "mmdebstrap: W: a warning",
    "mmdebstrap: E: apt-get failed",
  ]);
});

it("npm start shows the builder's lines, mmdebstrap's stages and errors; hides its warnings", () => {
  const lines = [
    "[rootfs] building debian-bookworm-abc (Debian bookworm minbase + 14 packages) into /x: downloads from Debian's archive, takes minutes",
    "[rootfs] mmdebstrap: I: downloading packages with apt...",
    "[rootfs] configured 50 packages",
    "[rootfs] mmdebstrap: W: Download is performed unsandboxed as root",
    "[rootfs] mmdebstrap: E: apt-get failed",
    "",
  ];
  expect(lines.map((l) => progressLine(l)).filter((l) => l !== undefined)).toEqual([
    "building debian-bookworm-abc (Debian bookworm minbase + 14 packages) into /x: downloads from Debian's archive, takes minutes",
    "downloading packages with apt...",
    "configured 50 packages",
    "E: apt-get failed",
  ]);
});

it("starts no builder when base is in the store", () => {
  const dir = mkdtempSync(join(tmpdir(), "base-rootfs-"));
  try {
    const store = new RootfsStore(dir);
    mkdirSync(join(dir, "layers", "l1", "rootfs"), { recursive: true });
    writeFileSync(join(dir, "layers", "l1", "layer.json"), JSON.stringify({ id: "l1" }));
    store.putTemplate("base", ["l1"]);
    const logged: string[] = [];
    expect(buildBaseInBackground((l) => logged.push(l), store)).toBeUndefined();
    expect(logged).toEqual([]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
