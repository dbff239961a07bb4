// The writer of the runtime's streaming (chunked) responses, e.g. /execute's NDJSON lines.
// Chunks written during one turn of the event loop (lines a driver sent together) leave in one
// write once that turn's I/O callbacks are done, and end() sends what is still held together with
// the terminating chunk: one packet and one wake-up less for each hop back to the client.
// Node 22 drops a chunk that a corked chunked response still holds when end() is called (a
// 10-line cell printed only its first line), so end() releases every cork first.
import type { ServerResponse } from "node:http";

export interface StreamWriter {
  /** Sends `chunk` with the others of this loop turn; nothing once the response ended or broke. */
  write(chunk: string): void;
  /** Sends what is held and ends the response, in one write. */
  end(): void;
}

export function streamWriter(res: ServerResponse): StreamWriter {
  const done = () => res.writableEnded || res.destroyed;
  return {
    write(chunk) {
      if (done()) return;
      if (!res.writableCorked) {
        res.cork();
        setImmediate(() => {
          if (res.writableCorked && !res.writableEnded) res.uncork();
        });
      }
      res.write(chunk);
    },
    end() {
      if (res.writableEnded) return;
      // The socket's cork makes the released chunks and the end one write (end() uncorks it).
      res.socket?.cork();
      while (res.writableCorked) res.uncork();
      res.end();
    },
  };
}
