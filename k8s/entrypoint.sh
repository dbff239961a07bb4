#!/bin/sh
# agent (default) or agent-runtime (when the first argument is --port, as the injected sidecar is
# started), so one image serves both roles.
case "$1" in
  --port) exec node /app/controllers/runtime/main.ts --host 0.0.0.0 "$@" ;;
  *) exec node /app/controllers/agent/main.ts "$@" ;;
esac
