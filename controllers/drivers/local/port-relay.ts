// Inbound connections to user ports of sandboxes that have their own, empty network namespace
// (allowInternetAccess: false): nothing on the host can reach their loopback over TCP, and Node
// cannot setns(). One small perl process per driver (port-relay.pl, started on first use, ~4 MB)
// accepts on a Unix socket and forks a child per connection that enters the sandbox's network
// namespace only and connects to 127.0.0.1:<port> there. Idle sandboxes cost nothing.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { connect, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { PERL, setnsSyscall } from "./local-view.ts";
import type { ProcRef } from "./records.ts";

const RELAY_SCRIPT = fileURLToPath(new URL("./port-relay.pl", import.meta.url));
/** The longest error line the relay sends; anything longer is a broken relay. */
const MAX_ANSWER = 256;

export class PortRelay {
  #dir: string | undefined;
  #child: ChildProcess | undefined;
  #ready: Promise<string> | undefined;

  /** The relay's socket path, starting the relay when it is not running. */
  #start(): Promise<string> {
    if (this.#ready) return this.#ready;
    // A private directory: only this process's user reaches the socket (the relay runs as it).
    this.#dir ??= mkdtempSync(join(tmpdir(), "kruise-relay-"));
    const path = join(this.#dir, "relay.sock");
    const child = spawn(PERL, [RELAY_SCRIPT, path, String(setnsSyscall())], { stdio: ["ignore", "pipe", "inherit"] });
    this.#child = child;
    const ready = new Promise<string>((resolve, reject) => {
      let out = "";
      child.stdout!.on("data", (c) => {
        out += String(c);
        if (!out.includes("ready\n")) return;
        // Waiting for the relay kept the process alive; a running relay must not.
        (child.stdout as unknown as { unref(): void }).unref();
        resolve(path);
      });
      child.once("error", reject);
      child.once("exit", (code, signal) => reject(new Error(`port relay exited (${signal ?? code}) before it was ready`)));
    });
    child.once("exit", () => {
      // The next connection starts a new relay.
      if (this.#child === child) [this.#child, this.#ready] = [undefined, undefined];
    });
    child.unref();
    this.#ready = ready;
    ready.catch(() => {});
    return ready;
  }

  /** A socket connected to `port` on the loopback of the network namespace of `nsInit`, ready for
   * the caller's bytes. Rejects with the relay's reason (e.g. connection refused) otherwise. */
  async connect(nsInit: ProcRef, port: number): Promise<Socket> {
    const path = await this.#start();
    const socket = connect(path);
    socket.write(`${nsInit.pid} ${nsInit.start} ${port}\n`);
    return new Promise<Socket>((resolve, reject) => {
      let answer = Buffer.alloc(0);
      const fail = (err: Error) => {
        socket.destroy();
        reject(err);
      };
      const onReadable = () => {
        let chunk: Buffer | null;
        // Byte by byte up to the newline, so nothing after it is taken from the stream's owner.
        while ((chunk = socket.read(1) as Buffer | null) !== null) {
          if (chunk[0] !== 0x0a) {
            answer = Buffer.concat([answer, chunk]);
            if (answer.length > MAX_ANSWER) return fail(new Error("port relay: answer too long"));
            continue;
          }
          socket.off("readable", onReadable).off("error", fail).off("end", onEnd);
          const text = answer.toString();
          if (text === "ok") return resolve(socket);
          return fail(new Error(text));
        }
      };
      const onEnd = () => fail(new Error("port relay closed the connection without an answer"));
      socket.on("readable", onReadable).once("error", fail).once("end", onEnd);
    });
  }

  dispose(): void {
    this.#child?.kill("SIGKILL");
    [this.#child, this.#ready] = [undefined, undefined];
    if (this.#dir) rmSync(this.#dir, { recursive: true, force: true });
    this.#dir = undefined;
  }
}
