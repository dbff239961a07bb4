// The local driver's sandbox records, as an agent started after another one reads them back: the
// plain file this release writes, and the two-slot file the next release's writer will leave
// (records.ts says why this reader is ahead of its writer), whole or torn by a kill mid-write.
import { randomBytes } from "node:crypto";
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { readRecord, writeRecord, type SandboxRecord } from "../../../../../controllers/drivers/local/records.ts";

let dir: string;
let file: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "records-"));
  file = join(dir, "record.json");
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** A record; `pad` lengthens it by a string of that many `fill`s (the same length with other bytes). */
const record = (generation: number, pad = 0, fill = "a"): SandboxRecord => ({
  id: "sbx1", generation, level: "bwrap+cgroup", createdAt: new Date(0).toISOString(), phase: "Running",
  desired: {
    id: "sbx1", generation, template: "base", state: "Running", pauseStrategy: "Freeze", allowInternetAccess: false,
    resources: { cpuCount: 1, memoryMB: 256 },
  },
  holder: { pid: 1000 + generation, start: "42" }, holderNonce: fill.repeat(pad),
});

// The two-slot layout as the next release writes it: slot 0 padded with spaces to a page multiple,
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

describe("records", () => {
  it("writes the plain format, which an older agent reads too, and reads it back", () => {
    writeRecord(file, record(1));
    writeRecord(file, record(2));
    expect(readRecord(file)).toEqual(record(2));
    // What an agent before the two-slot reader does (JSON.parse of the whole file): the writer may
    // not change until no such agent can read these files or the host's leases.
    expect(JSON.parse(readFileSync(file, "utf8"))).toEqual(record(2));
    expect(readdirSync(dir)).toEqual(["record.json"]);
    expect(statSync(file).mode & 0o777).toBe(0o600);
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
