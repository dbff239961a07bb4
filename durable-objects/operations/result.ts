// Operations answer with a `Result`: a refusal is data with its code, anything else is a bug.
import { ApiError } from "../../schema/errors.ts";
import type { Result } from "../sandbox/state.ts";

/** Runs `work`, turning an `ApiError` into a refusal; anything else is a bug and throws. */
export async function refusalsAsResult<T extends object>(work: () => Promise<T>): Promise<Result<T>> {
  try {
    return { ok: true, ...(await work()) };
  } catch (err) {
    if (err instanceof ApiError) return { ok: false, error: err.toRefusal() };
    throw err;
  }
}
