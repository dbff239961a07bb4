// A real driver whose `ensure` fails on demand, for tests of the error model through the whole
// system. A sandbox asks for its faults through a user annotation (E2B create metadata), so only
// the sandboxes a test creates that way are affected:
//   fault: "transient:N"   the first N ensure calls throw a plain (transient) Error
//   fault: "terminal"      every ensure call throws a TerminalError
//   fault: "slow-pause:MS" every ensure call that asks for the sandbox paused waits MS first (a
//                          pause the driver takes a while over, as a Kubernetes pod that stops)
// Everything else goes to the wrapped driver unchanged.
import { TerminalError, type DesiredSandbox, type Driver } from "../../controllers/drivers/driver.ts";

export const FAULT_KEY = "fault";

export interface FaultyDriver {
  driver: Driver;
  /** Per sandbox id that asked for a fault: which, ensure calls, and how many of them threw. */
  calls: Map<string, { fault: string; calls: number; thrown: number }>;
}

export function faultyDriver(inner: Driver): FaultyDriver {
  const calls = new Map<string, { fault: string; calls: number; thrown: number }>();
  const ensure = async (d: DesiredSandbox) => {
    const fault = d.annotations?.[FAULT_KEY];
    if (!fault) return inner.ensure(d);
    const seen = calls.get(d.id) ?? { fault, calls: 0, thrown: 0 };
    calls.set(d.id, seen);
    seen.calls++;
    const slow = /^slow-pause:(\d+)$/.exec(fault);
    if (slow) {
      if (d.state === "Paused") await new Promise((r) => setTimeout(r, Number(slow[1])));
      return inner.ensure(d);
    }
    if (fault === "terminal") {
      seen.thrown++;
      throw new TerminalError("ImageNotFound", `image "nope:latest" cannot exist (injected for ${d.id})`);
    }
    const n = Number(/^transient:(\d+)$/.exec(fault)?.[1] ?? 0);
    if (seen.thrown < n) {
      seen.thrown++;
      throw new Error(`cgroup write failed: EBUSY (injected ${seen.thrown} of ${n})`);
    }
    return inner.ensure(d);
  };
  // Every other member is the wrapped driver's own, bound to it (its private fields stay reachable).
  const driver = new Proxy(inner, {
    get(target, prop) {
      if (prop === "ensure") return ensure;
      const v = Reflect.get(target, prop, target) as unknown;
      return typeof v === "function" ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
  return { driver, calls };
}
