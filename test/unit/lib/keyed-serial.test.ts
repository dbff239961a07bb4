import { describe, expect, it } from "vitest";
import { KeyedSerial } from "../../../lib/keyed-serial.ts";

const tick = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("KeyedSerial", () => {
  it("runs one key's work in order, even when a later item is quicker, and keeps going after a failure", async () => {
    const serial = new KeyedSerial();
    const log: string[] = [];
    const a = serial.run("k", async () => (await tick(20), log.push("slow"), 1));
    const b = serial.run("k", async () => {
      log.push("fails");
      throw new Error("boom");
    });
    const c = serial.run("k", async () => (log.push("quick"), 3));
    await expect(a).resolves.toBe(1);
    await expect(b).rejects.toThrow("boom");
    await expect(c).resolves.toBe(3);
    expect(log).toEqual(["slow", "fails", "quick"]);
  });

  it("runs different keys concurrently and forgets a key once its work is done", async () => {
    const serial = new KeyedSerial();
    const log: string[] = [];
    const slow = serial.run("a", async () => (await tick(20), log.push("a")));
    const quick = serial.run("b", async () => log.push("b"));
    expect(serial.size).toBe(2);
    await Promise.all([slow, quick]);
    expect(log).toEqual(["b", "a"]);
    await tick(0);
    expect(serial.size).toBe(0);
  });
});
