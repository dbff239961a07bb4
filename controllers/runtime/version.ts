/** The envd version this runtime is wire-compatible with. The control plane returns it as
 * `envdVersion`; the SDKs gate features on it (0.6.4 unlocks everything up to watching network
 * mounts: stdin, closeStdin, octet-stream upload, file metadata, includeEntry). */
export const ENVD_VERSION = "0.6.4";
