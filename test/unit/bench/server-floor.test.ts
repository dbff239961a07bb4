// bench/server-floor.ts's composition: the bound the e2e benches print beside
// e2e.server_cpu_ms_each. A wrong count or unit reads as a wrong target met or missed.
import { expect, it } from "vitest";
import { composeServerFloor, CYCLE_FLOOR, floorByProcess, type UnitFloors } from "../../../bench/server-floor.ts";

const floors: UnitFloors = { request: 0.4, sqld: 1.5, frame: 0.7, cmdServer: 2.8, cmdSpawner: 1.9, isolation: 2.3, isolationSteps: {}, isolationRssKB: NaN };
const near = (got: number[], want: number[]) => {
  expect(got).toHaveLength(want.length);
  got.forEach((g, i) => expect(g).toBeCloseTo(want[i]!, 10));
};

it("one at a time: 3 requests, 2 storing turns at the cheaper workerd event, 1 frame, 2 libSQL requests, 1 command", () => {
  const { total, parts } = composeServerFloor(floors, { concurrent: false });
  near(parts.map((p) => p.ms), [1.2, 0.8, 0.7, 3, 4.7]);
  expect(total).toBeCloseTo(1.2 + 0.8 + 0.7 + 3 + 4.7, 10);
});

it("concurrent: what cycles could share (the frame, the libSQL requests) counts 0, so the bound is lower", () => {
  const { total, parts } = composeServerFloor(floors, { concurrent: true });
  near(parts.map((p) => p.ms), [1.2, 0.8, 0, 0, 4.7]);
  expect(total).toBeLessThan(composeServerFloor(floors, { concurrent: false }).total);
});

it("a storing turn is valued at the cheaper of the two workerd events, whichever it is", () => {
  const turns = (f: UnitFloors) => composeServerFloor(f, { concurrent: true }).parts[1]!.ms;
  expect(turns({ ...floors, request: 0.9, frame: 0.5 })).toBe(1);
  expect(turns({ ...floors, request: 0.3, frame: 0.5 })).toBeCloseTo(0.6, 10);
});

it("refuses a floor that was not measured (no cmd floor: NaN) rather than print a bound without it", () => {
  expect(() => composeServerFloor({ ...floors, cmdServer: NaN, cmdSpawner: NaN }, { concurrent: true })).toThrow(/command/);
});

it("counts nine units per cycle; making and destroying the isolation is none of them", () => {
  expect(CYCLE_FLOOR.reduce((a, i) => a + i.count, 0)).toBe(9);
});

it("with the isolation: one sandbox made and destroyed per cycle, counted at 20 clients too (nothing to share)", () => {
  for (const concurrent of [true, false]) {
    const without = composeServerFloor(floors, { concurrent });
    const { total, parts } = composeServerFloor(floors, { concurrent, withIsolation: true });
    near(parts.map((p) => p.ms), [...without.parts.map((p) => p.ms), 2.3]);
    expect(total).toBeCloseTo(without.total + 2.3, 10);
  }
});

it("refuses a floor with the isolation when the isolation unit was not measured, and leaves the one without it alone", () => {
  const unmeasured = { ...floors, isolation: NaN };
  expect(() => composeServerFloor(unmeasured, { concurrent: true, withIsolation: true })).toThrow(/isolation/);
  expect(composeServerFloor(unmeasured, { concurrent: true }).total).toBeCloseTo(composeServerFloor(floors, { concurrent: true }).total, 10);
});

it("splits the floor by process: the command and the isolation are the agent's and spawner's, the libSQL requests sqld's, the rest the edge's", () => {
  const by = floorByProcess([floors], { concurrent: false, withIsolation: true });
  expect(by.agentSpawner).toBeCloseTo(4.7 + 2.3, 10);
  expect(by.sqld).toBeCloseTo(3, 10);
  expect(by.edge).toBeCloseTo(1.2 + 0.8 + 0.7, 10);
});

it("split by process at 20 clients: sqld's share is 0 (shared), the edge keeps its 5 unshared events, the agent and spawner the command and isolation", () => {
  const by = floorByProcess([floors], { concurrent: true, withIsolation: true });
  expect(by.sqld).toBe(0);
  expect(by.edge).toBeCloseTo(3 * 0.4 + 2 * Math.min(0.4, 0.7), 10);
  expect(by.agentSpawner).toBeCloseTo(4.7 + 2.3, 10);
});
