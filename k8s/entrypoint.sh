#!/bin/sh
# One image, three roles:
#   (default)            the agent
#   --port ...           agent-runtime, as the kubernetes driver injects the sidecar
#   traffic-proxy ...    the egress proxy of one sandbox (controllers/traffic/README.md), e.g.
#                        traffic-proxy --listen 127.0.0.1:3128 --policy-file /etc/traffic/policy.json
# RUNTIME_DIST: where the runtime's bundle is (the image's; tests point it at theirs).
runtime=${RUNTIME_DIST:-/app/dist/runtime}
case "$1" in
  # The allocator settings main.ts would otherwise re-execute itself to get (one start, not two).
  # The runtime starts from the startup snapshot the image build wrote (main.blob,
  # controllers/runtime/snapshot.ts); without one, start.cjs runs main.cjs from its code cache
  # (controllers/runtime/start.cjs). `--` ends node's options: the rest are the runtime's.
  --port)
    if [ -f "$runtime/main.blob" ]; then
      MALLOC_ARENA_MAX=2 exec node --max-semi-space-size=2 --snapshot-blob "$runtime/main.blob" -- --host 0.0.0.0 "$@"
    fi
    MALLOC_ARENA_MAX=2 exec node --max-semi-space-size=2 "$runtime/start.cjs" --host 0.0.0.0 "$@" ;;
  traffic-proxy) shift; exec node /app/controllers/traffic/main.ts "$@" ;;
  *) exec node /app/controllers/agent/main.ts "$@" ;;
esac
