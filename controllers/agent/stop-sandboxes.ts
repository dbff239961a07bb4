// What an agent's stop does to its sandboxes (`--on-exit stop|destroy`). The launcher gives the
// agent a bounded grace before SIGKILL (scripts/lib/system.ts), and one sandbox's cleanup
// (unmounting its root and disk, removing its cgroups and files) cost 40–140 ms on the project's
// 2-core machine, one after another: 100 sandboxes outlasted a 10 s grace and left a quarter of
// them running. So a destroy first ends every sandbox's processes at once (cgroup.kill each, a few
// ms): whatever cuts the rest short, nothing of a sandbox runs on. The cleanups then run a few at
// a time, and one that fails is logged and never stops the others.
import type { DesiredSandbox, Driver } from "../drivers/driver.ts";

/** Cleanups at once: more only queue behind the same mount table and spawner (measured: 4 at a
 * time gained over 1, 8 did not over 4). */
export const STOP_CONCURRENCY = 4;

export interface StopSandboxesOptions {
  driver: Pick<Driver, "list" | "destroy" | "ensure">;
  onExit: "stop" | "destroy";
  /** Ends a sandbox's processes and nothing else (the local driver's `endProcesses`). */
  endProcesses?: (id: string) => Promise<void>;
  /** The stopped state of a sandbox to keep (undefined: nothing to stop, e.g. no template). */
  stoppedFor(id: string): DesiredSandbox | undefined;
  log(msg: string): void;
}

/** Stops or destroys every sandbox the driver has; resolves when all are done (failures logged). */
export async function stopSandboxes(o: StopSandboxesOptions): Promise<{ count: number; failed: number }> {
  const started = Date.now();
  const all = await o.driver.list();
  if (o.onExit === "destroy" && o.endProcesses) await Promise.all(all.map((s) => o.endProcesses!(s.id).catch(() => {})));
  const todo = all.filter((s) => o.onExit === "destroy" || s.phase === "Running" || s.phase === "Paused");
  const n = todo.length;
  let failed = 0;
  const one = async (id: string) => {
    if (o.onExit === "destroy") return o.driver.destroy(id);
    const stopped = o.stoppedFor(id);
    if (stopped) await o.driver.ensure(stopped);
  };
  await Promise.all(
    Array.from({ length: Math.min(STOP_CONCURRENCY, todo.length) }, async () => {
      for (let s = todo.shift(); s; s = todo.shift()) {
        const id = s.id;
        await one(id).catch((err: unknown) => {
          failed++;
          o.log(`could not ${o.onExit} sandbox ${id}: ${(err as Error).message}`);
        });
      }
    }),
  );
  o.log(`${o.onExit === "destroy" ? "destroyed" : "stopped"} ${n - failed} of ${n} sandboxes in ${Date.now() - started} ms`);
  return { count: n, failed };
}
