// A process's output cut into log lines. A line longer than `max` UTF-16 units comes out in pieces
// of at most `max`: tenant output without newlines (`RUN yes | tr -d '\n'`) must neither grow one
// string without bound (V8 throws at its string limit, in a stream listener: the process dies) nor
// be scanned again with every chunk (quadratic, on the agent's event loop). Each chunk is scanned
// once; what is kept between chunks is under `max`. A piece never ends between the two halves of a
// surrogate pair (each half alone would be written to the log as U+FFFD): it ends one unit short
// instead, and the high half starts the next piece.
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
      while (nl - from > this.#max) from = this.#piece(text, from);
      this.#emit(text.slice(from, nl));
      from = nl + 1;
    }
    while (text.length - from >= this.#max) from = this.#piece(text, from);
    this.#rest = text.slice(from);
  }

  /** The last line, when the output did not end with a newline. */
  end(): void {
    if (this.#rest) this.#emit(this.#rest);
    this.#rest = "";
  }

  /** Emits the piece of `max` units at `from` (one less if it would end on a high surrogate, whose
   *  low half may still be to come); returns where the next piece starts. */
  #piece(text: string, from: number): number {
    let end = from + this.#max;
    if (end - 1 > from && isHighSurrogate(text.charCodeAt(end - 1))) end--;
    this.#emit(text.slice(from, end));
    return end;
  }
}

function isHighSurrogate(unit: number): boolean {
  return unit >= 0xd800 && unit <= 0xdbff;
}
