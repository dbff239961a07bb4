// A process's output cut into log lines. A line longer than `max` characters comes out in pieces of
// `max`: tenant output without newlines (`RUN yes | tr -d '\n'`) must neither grow one string
// without bound (V8 throws at its string limit, in a stream listener: the process dies) nor be
// scanned again with every chunk (quadratic, on the agent's event loop). Each chunk is scanned once;
// what is kept between chunks is under `max`.
export class LineCutter {
  #rest = "";
  readonly #emit: (line: string) => void;
  readonly #max: number;

  constructor(emit: (line: string) => void, max = 8192) {
    this.#emit = emit;
    this.#max = max;
  }

  push(chunk: string): void {
    const text = this.#rest + chunk;
    let from = 0;
    for (let nl = text.indexOf("\n"); nl >= 0; nl = text.indexOf("\n", from)) {
      for (; nl - from > this.#max; from += this.#max) this.#emit(text.slice(from, from + this.#max));
      this.#emit(text.slice(from, nl));
      from = nl + 1;
    }
    for (; text.length - from >= this.#max; from += this.#max) this.#emit(text.slice(from, from + this.#max));
    this.#rest = text.slice(from);
  }

  /** The last line, when the output did not end with a newline. */
  end(): void {
    if (this.#rest) this.#emit(this.#rest);
    this.#rest = "";
  }
}
