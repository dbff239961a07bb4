// The local driver's sandbox records, as an agent started after another one (or after being killed
// mid-write) reads them back: the two-slot file this release writes in place, whole or torn, and
// the plain file of agents before b1d5c270 (or written by hand).
import { randomBytes } from "node:crypto";
import { closeSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { forgetRecord, readRecord, writeRecord, type SandboxRecord } from "../../../../../controllers/drivers/local/records.ts";

let dir: string;
let file: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "records-"));
  file = join(dir, "record.json");
});
afterEach(() => {
  // As a destroy does: what the writer kept of the file goes.
  forgetRecord(file);
  rmSync(dir, { recursive: true, force: true });
});

/** A record; `pad` lengthens it by a string of that many `fill`s (the same length with other bytes). */
const record = (generation: number, pad = 0, fill = "a"): SandboxRecord => ({
  id: "sbx1", generation, level: "bwrap+cgroup", createdAt: new Date(0).toISOString(), phase: "Running",
  desired: {
    id: "sbx1", generation, template: "base", state: "Running", pauseStrategy: "Freeze", allowInternetAccess: false,
    resources: { cpuCount: 1, memoryMB: 256 },
  },
  holder: { pid: 1000 + generation, start: "42" }, holderNonce: fill.repeat(pad),
});

// The two-slot layout as the writer leaves it: slot 0 padded with spaces to a page multiple,
// its last byte the newline; slot 1 after it, padded to the file's end.
const SLOT0 = 8192;
const PAGE = 4096;
const wrap = (seq: number, rec: SandboxRecord, end = seq) => `{"seq":${seq},"record":${JSON.stringify(rec)},"end":${end}}`;
const slotted = (s0: string, s1 = "", tail = 0): Buffer => {
  const body = Buffer.alloc(SLOT0 + Math.max(Buffer.byteLength(s1), tail), " ");
  body.write(s0);
  body[SLOT0 - 1] = 0x0a;
  body.write(s1, SLOT0);
  return body;
};
/** What a write of `after` over `before`, in place, leaves when the writer is killed `at` bytes in
 * (pages land in order: `after` up to there, what was there before after it). */
const torn = (before: Buffer, after: Buffer, at: number) => Buffer.concat([after.subarray(0, at), before.subarray(at)]);
/** Overwrites part of the record file in place (its inode kept). */
const overwrite = (at: number, bytes: Buffer) => {
  const fd = openSync(file, "r+");
  writeSync(fd, bytes, 0, bytes.length, at);
  closeSync(fd);
};
/** The writer as another agent process has it: a module instance of its own, knowing nothing. */
const otherProcess = async () => {
  vi.resetModules();
  return (await import("../../../../../controllers/drivers/local/records.ts")) as typeof import("../../../../../controllers/drivers/local/records.ts");
};

const isEqualRecord = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);

describe("records", () => {
  it("reads back the last record written, in one file rewritten in place, root's only", () => {
    writeRecord(file, record(1));
    const ino = statSync(file).ino;
    for (let g = 2; g <= 7; g++) {
      writeRecord(file, record(g));
      // No new file per write (each new inode costs the agent a scan on ext4 without a journal).
      expect(statSync(file).ino).toBe(ino);
      expect(readRecord(file)).toEqual(record(g));
    }
    expect(readdirSync(dir)).toEqual(["record.json"]);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    // The layout the reader of b1d5c270 (the release before this writer) reads.
    const buf = readFileSync(file);
    expect(buf.indexOf(0x0a)).toBe(SLOT0 - 1);
    expect(JSON.parse(buf.toString("utf8", SLOT0))).toEqual({ seq: 6, record: record(6), end: 6 });
  });

  it("reads a shorter record written over a longer one, and one too long for its slot", () => {
    writeRecord(file, record(1, 3000));
    writeRecord(file, record(2, 3000));
    writeRecord(file, record(3));
    writeRecord(file, record(4, 0, "b"));
    expect(readRecord(file)).toEqual(record(4, 0, "b"));
    for (let g = 5; g <= 10; g++) {
      writeRecord(file, record(g, g % 2 ? 20_000 : 0));
      expect(readRecord(file)).toEqual(record(g, g % 2 ? 20_000 : 0));
      forgetRecord(file);
      expect(readRecord(file)).toEqual(record(g, g % 2 ? 20_000 : 0));
    }
  });

  it("continues from the file on disk in a new agent process, over the slot not holding its record", async () => {
    writeRecord(file, record(1));
    writeRecord(file, record(2));
    const ino = statSync(file).ino;
    const other = await otherProcess();
    other.writeRecord(file, record(3));
    expect(readRecord(file)).toEqual(record(3));
    expect(statSync(file).ino).toBe(ino);
    // A sequence far along, in slot 1 (numbers, not a counter that wraps).
    writeFileSync(file, slotted(wrap(4, record(4)), wrap(2 ** 40, record(8))));
    forgetRecord(file);
    writeRecord(file, record(9));
    expect(readRecord(file)).toEqual(record(9));
    expect(JSON.parse(readFileSync(file).toString("utf8", 0, SLOT0))).toMatchObject({ seq: 2 ** 40 + 1 });
  });

  it("reads a plain record (an agent's before b1d5c270), kept whole until a new record replaces it", () => {
    writeFileSync(file, JSON.stringify(record(1)), { mode: 0o600 });
    expect(readRecord(file)).toEqual(record(1));
    writeRecord(file, record(2));
    expect(readRecord(file)).toEqual(record(2));
    writeRecord(file, record(3));
    forgetRecord(file);
    expect(readRecord(file)).toEqual(record(3));
    expect(readdirSync(dir)).toEqual(["record.json"]);
    // Written by hand with newlines (`jq .`) under a writer that had written the file in place.
    writeFileSync(file, JSON.stringify(record(4), null, 2));
    writeRecord(file, record(5));
    expect(readRecord(file)).toEqual(record(5));
  });

  it("says once in the log that an older driver writes the data directory when it finds a plain record over its slots", async () => {
    const w = await otherProcess();
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    try {
      // A plain record it finds first is an upgrade's, not a sign.
      writeFileSync(file, JSON.stringify(record(1)), { mode: 0o600 });
      w.writeRecord(file, record(2));
      w.writeRecord(file, record(3));
      expect(warn).not.toHaveBeenCalled();
      for (const g of [4, 6]) {
        writeFileSync(file, JSON.stringify(record(g)));
        w.writeRecord(file, record(g + 1));
        expect(w.readRecord(file)).toEqual(record(g + 1));
      }
      expect(warn).toHaveBeenCalledTimes(1);
      expect(String(warn.mock.calls[0]![0])).toMatch(/older than b1d5c270 \(agent, test suite or bench\)/);
    } finally {
      warn.mockRestore();
      w.forgetRecord(file);
    }
  });

  it("never writes through a link planted in the record's place", () => {
    writeRecord(file, record(1));
    const target = join(dir, "elsewhere");
    writeFileSync(target, "untouched");
    rmSync(file);
    symlinkSync(target, file);
    expect(() => writeRecord(file, record(2))).toThrow();
    expect(readFileSync(target, "utf8")).toBe("untouched");
  });

  it("keeps a whole record when another agent process made the file anew or grew it meanwhile", async () => {
    // The review's scenario: this writer knows slot 0 as 8 KiB; the other grows it to 32 KiB
    // (a new file); then this one writes. Trusting its memory, it wrote at 8 KiB, through the
    // other's slot 0 and its newline, and left no record.
    writeRecord(file, record(1));
    const other = await otherProcess();
    other.writeRecord(file, record(2));
    other.writeRecord(file, record(3, 20_000));
    writeRecord(file, record(4));
    expect(readRecord(file)).toEqual(record(4));
    // The same through one inode: the other's file copied over this one (cp keeps the inode).
    const path2 = join(dir, "other.json");
    other.writeRecord(path2, record(5, 20_000));
    writeFileSync(file, readFileSync(path2));
    writeRecord(file, record(6));
    expect(readRecord(file)).toEqual(record(6));
    // Grown by the other to a file whose slot 0 opens with the very number this writer wrote
    // last there (seq 3): the newline where slot 0 ended tells them apart.
    rmSync(file);
    for (let g = 20; g <= 22; g++) writeRecord(file, record(g));
    rmSync(file);
    other.writeRecord(file, record(23));
    other.writeRecord(file, record(24));
    other.writeRecord(file, record(25, 20_000));
    expect(readFileSync(file).toString("utf8", 0, 18)).toBe(`{"seq":3,"record":`);
    writeRecord(file, record(26));
    expect(readRecord(file)).toEqual(record(26));
    // Made anew by the other (removed, written three times) after this writer's one write: this
    // writer goes on from the other's number, so its record is the newest, as the last written.
    rmSync(file);
    writeRecord(file, record(10));
    rmSync(file);
    for (let g = 11; g <= 13; g++) other.writeRecord(file, record(g));
    writeRecord(file, record(14));
    expect(readRecord(file)).toEqual(record(14));
    // Both writing in place, in turns: the last written is read.
    other.writeRecord(file, record(7));
    writeRecord(file, record(8));
    expect(readRecord(file)).toEqual(record(8));
    other.writeRecord(file, record(9));
    expect(readRecord(file)).toEqual(record(9));
    other.forgetRecord(file);
    other.forgetRecord(path2);
  });

  it("never writes over another writer's slot of the number it takes: a kill then leaves a record that was written", async () => {
    // Review M1: this writer's slot 1 check passed, and it wrote seq 2 over the other's seq 2;
    // killed a page in, the slot parsed whole with its first page this writer's and the rest the
    // other's (a holderNonce "ppp…qqq" that no one wrote). It must read the file and write seq 3.
    writeRecord(file, record(1, 6000, "a"));
    const other = await otherProcess();
    other.writeRecord(file, record(2, 6000, "q"));
    const before = readFileSync(file);
    writeRecord(file, record(3, 6000, "p"));
    const after = readFileSync(file);
    expect(readRecord(file)).toEqual(record(3, 6000, "p"));
    for (let at = 0; at <= Math.max(before.length, after.length); at += PAGE) {
      writeFileSync(file, torn(before, after, at));
      expect([record(2, 6000, "q"), record(3, 6000, "p")]).toContainEqual(readRecord(file));
    }
    other.forgetRecord(file);
  });

  it("writes on from what it kept, without reading the file again, while the file is as it left it", () => {
    // The point of keeping what it wrote (issue 16: CPU per create). A slot of a higher number
    // planted where this writer writes next is not seen by a writer that trusts its memory (it
    // writes 2 over it); one that read the file each time would go on from 6 and write 7.
    writeRecord(file, record(1));
    overwrite(SLOT0, Buffer.from(wrap(6, record(6))));
    writeRecord(file, record(2));
    const buf = readFileSync(file);
    expect(buf.toString("utf8", 0, 18)).toBe(`{"seq":1,"record":`);
    expect(buf.toString("utf8", SLOT0, SLOT0 + 18)).toBe(`{"seq":2,"record":`);
    // And after an in-place write too (slot 1 written last, slot 0 next).
    overwrite(0, Buffer.from(wrap(9, record(9))));
    writeRecord(file, record(3));
    expect(readFileSync(file).toString("utf8", 0, 18)).toBe(`{"seq":3,"record":`);
    expect(readRecord(file)).toEqual(record(3));
  });

  it("writes a record exactly as long as slot 0 allows in place, and one a byte longer into a grown file", () => {
    // Seq 3 goes to slot 0 (8 KiB): its slot fits with the newline at 8191, not at 8192.
    const base = Buffer.byteLength(wrap(3, record(3)));
    for (const len of [SLOT0 - 1, SLOT0]) {
      forgetRecord(file);
      rmSync(file, { force: true });
      writeRecord(file, record(1));
      writeRecord(file, record(2));
      const ino = statSync(file).ino;
      const rec = record(3, len - base);
      expect(Buffer.byteLength(wrap(3, rec))).toBe(len);
      writeRecord(file, rec);
      expect(readRecord(file)).toEqual(rec);
      forgetRecord(file);
      expect(readRecord(file)).toEqual(rec);
      const buf = readFileSync(file);
      if (len < SLOT0) {
        expect(statSync(file).ino).toBe(ino);
        expect(buf.indexOf(0x0a)).toBe(SLOT0 - 1);
      } else {
        expect(buf.indexOf(0x0a)).toBe(2 * SLOT0 - 1);
      }
    }
  });

  it("tells its slot of seq 3 from another's slot of seq 30 in a file made anew", () => {
    for (let g = 1; g <= 3; g++) writeRecord(file, record(g));
    // Seq 3 in slot 0, as this writer left it; the other makes the file anew, same layout.
    writeFileSync(file, slotted(wrap(30, record(30)), wrap(29, record(29))));
    writeRecord(file, record(31));
    expect(readRecord(file)).toEqual(record(31));
  });

  it("reads the record before or the new one wherever a kill cut a write, twice in a row", () => {
    writeRecord(file, record(1, 5000, "a"));
    writeRecord(file, record(2, 5000, "b"));
    // Every cut of a write over slot 0 with a record longer than a page, then (a new agent
    // having read the record before) of its write of another record over the same torn slot.
    const before = readFileSync(file);
    writeRecord(file, record(3, 5000, "c"));
    const first = readFileSync(file);
    const cuts = new Set<number>();
    for (let at = 0; at <= first.length; at += 97) cuts.add(at);
    for (let at = 0; at <= first.length; at += PAGE) cuts.add(at);
    for (const at of cuts) {
      const once = torn(before, first, at);
      writeFileSync(file, once);
      const got = readRecord(file);
      expect([record(2, 5000, "b"), record(3, 5000, "c")]).toContainEqual(got);
      if (!isEqualRecord(got, record(2, 5000, "b"))) continue;
      forgetRecord(file);
      writeRecord(file, record(4, 4000, "d"));
      const second = readFileSync(file);
      for (const at2 of [1, PAGE - 1, PAGE, at - 1, at, at + 1, 2 * PAGE]) {
        if (at2 < 0 || at2 > second.length) continue;
        writeFileSync(file, torn(once, second, at2));
        expect([record(2, 5000, "b"), record(4, 4000, "d")]).toContainEqual(readRecord(file));
      }
      // And a third agent writes on from what it reads.
      forgetRecord(file);
      writeRecord(file, record(5));
      expect(readRecord(file)).toEqual(record(5));
      forgetRecord(file);
    }
  });

  it("reads a plain record with newlines in it (pretty-printed by hand), and none where there is no file", () => {
    writeFileSync(file, `${JSON.stringify(record(3), null, 2)}\n`);
    expect(readRecord(file)).toEqual(record(3));
    writeFileSync(file, `${JSON.stringify(record(4))}\n`);
    expect(readRecord(file)).toEqual(record(4));
    rmSync(file);
    expect(readRecord(file)).toBeUndefined();
  });

  it("reads the two-slot format: the record of the slot with the higher number, in either slot", () => {
    // Written once: slot 1 blank. An older reader takes this file for its wrapper.
    writeFileSync(file, slotted(wrap(2, record(2))));
    expect(readRecord(file)).toEqual(record(2));
    writeFileSync(file, slotted(wrap(2, record(2)), wrap(3, record(3))));
    expect(readRecord(file)).toEqual(record(3));
    writeFileSync(file, slotted(wrap(4, record(4)), wrap(3, record(3), 3), 2 * PAGE));
    expect(readRecord(file)).toEqual(record(4));
    // Numbers, not their text ("9" > "10").
    writeFileSync(file, slotted(wrap(10, record(10)), wrap(9, record(9))));
    expect(readRecord(file)).toEqual(record(10));
    writeFileSync(file, slotted(wrap(2 ** 40, record(5)), wrap(2 ** 40 + 1, record(6))));
    expect(readRecord(file)).toEqual(record(6));
  });

  it("reads the other slot when one was cut short at a page boundary, in slot 1 or slot 0", () => {
    // Slot 1 growing past a page, killed at its first page's end: the file ends mid-record.
    const before = slotted(wrap(4, record(4)), wrap(3, record(3)));
    const after = slotted(wrap(4, record(4)), wrap(5, record(5, 6000)));
    expect(after.length).toBeGreaterThan(SLOT0 + PAGE);
    writeFileSync(file, torn(before, after, SLOT0 + PAGE));
    expect(readRecord(file)).toEqual(record(4));
    // Slot 0 rewritten with a record of the same length, killed a page in: the new record's first
    // page and the old one's rest parse, as one record mixed from two, but end with the old number.
    const old = slotted(wrap(4, record(4, 6000, "a")), wrap(5, record(5)));
    const next = slotted(wrap(6, record(4, 6000, "b")), wrap(5, record(5)));
    const mixed = torn(old, next, PAGE);
    expect(JSON.parse(mixed.toString("utf8", 0, SLOT0 - 1))).toMatchObject({ seq: 6, end: 4 });
    writeFileSync(file, mixed);
    expect(readRecord(file)).toEqual(record(5));
  });

  it("reads the other slot when one is garbled (zeroed pages, random bytes)", () => {
    const whole = slotted(wrap(6, record(6, 5000)), wrap(7, record(7, 5000)));
    // Slot 1's data lost (a page of zeros, as a crash before writeback leaves).
    writeFileSync(file, Buffer.concat([whole.subarray(0, SLOT0 + PAGE), Buffer.alloc(whole.length - SLOT0 - PAGE)]));
    expect(readRecord(file)).toEqual(record(6, 5000));
    // Slot 0 garbled up to its newline.
    const garbled = Buffer.from(whole);
    Buffer.from(randomBytes(PAGE).map((b) => (b === 0x0a ? 0x20 : b))).copy(garbled, 100);
    writeFileSync(file, garbled);
    expect(readRecord(file)).toEqual(record(7, 5000));
  });

  it("reads no record when neither slot is whole, not even the one a slot's wrapper holds", () => {
    // Both slots torn.
    writeFileSync(file, slotted(wrap(6, record(6)).slice(0, 200), wrap(7, record(7)).slice(0, 300)));
    expect(readRecord(file)).toBeUndefined();
    // Slot 0 mixed from two writes, slot 1 blank: the whole file parses, as the wrapper, which is
    // no record (its `record` half the newer's, half the older's).
    writeFileSync(file, slotted(wrap(4, record(4), 2)));
    expect(readRecord(file)).toBeUndefined();
    writeFileSync(file, wrap(4, record(4), 2));
    expect(readRecord(file)).toBeUndefined();
    writeFileSync(file, "");
    expect(readRecord(file)).toBeUndefined();
  });
});
