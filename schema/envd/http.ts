// Bodies of envd's plain HTTP API (envd.yaml) that the runtime parses.
import { z } from "zod";

/** POST /init. Unknown fields (volumeMounts, hyperloopIP, caBundle, …) are accepted and ignored. */
export const InitRequest = z.object({
  accessToken: z.string().optional(),
  envVars: z.record(z.string(), z.string()).optional(),
  defaultUser: z.string().min(1).optional(),
  defaultWorkdir: z.string().min(1).optional(),
  timestamp: z.iso.datetime({ offset: true }).optional(),
});
export type InitRequest = z.infer<typeof InitRequest>;

/** The error body of every plain HTTP endpoint. */
export interface EnvdHttpError {
  code: number;
  message: string;
}
