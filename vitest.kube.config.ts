// The kube tier (`npm run test:kube`): the kubernetes driver and the CRDs against a real
// kube-apiserver + etcd built by tools/kube/build.sh. Separate from vitest.config.ts so plain
// `npm test` never needs the Go-built binaries.
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: "kube",
          include: ["test/kube/**/*.test.ts"],
          globalSetup: ["test/kube/global-setup.ts"],
          setupFiles: ["test/kube/support/setup.ts"],
          environment: "node",
          testTimeout: 60_000,
          hookTimeout: 120_000,
          fileParallelism: false,
        },
      },
    ],
  },
});
