#!/bin/sh
# One image, three roles:
#   (default)            the agent
#   --port ...           agent-runtime, as the kubernetes driver injects the sidecar
#   traffic-proxy ...    the egress proxy of one sandbox (controllers/traffic/README.md), e.g.
#                        traffic-proxy --listen 127.0.0.1:3128 --policy-file /etc/traffic/policy.json
case "$1" in
  # The allocator settings main.ts would otherwise re-execute itself to get (one start, not two).
  # start.cjs runs main.cjs from the code cache the image build wrote (controllers/runtime/start.cjs).
  --port) MALLOC_ARENA_MAX=2 exec node --max-semi-space-size=2 /app/dist/runtime/start.cjs --host 0.0.0.0 "$@" ;;
  traffic-proxy) shift; exec node /app/controllers/traffic/main.ts "$@" ;;
  *) exec node /app/controllers/agent/main.ts "$@" ;;
esac
