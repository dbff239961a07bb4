#!/usr/bin/env bash
# Builds a minimal OpenTelemetry Collector (OTLP receiver + file exporter, main.go here) from Go
# modules for the tracing tests and caches it outside the clone, keyed by the hash of this folder.
# Prints the binary's path. Test-only: nothing here ships.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
key=$(cat "$here/go.mod" "$here/main.go" | sha256sum | cut -c1-16)
bin=${SBX_OTELCOL_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/sandbox-edge/otelcol/$key}
if [[ ! -x $bin/otelcol ]]; then
  mkdir -p "$bin"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  cp "$here/go.mod" "$here/main.go" "$work/"
  export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0
  (cd "$work" && go mod tidy -e >&2 2>/dev/null; true) && (cd "$work" && go build -trimpath -ldflags=-s -o "$bin/otelcol.tmp" . && mv "$bin/otelcol.tmp" "$bin/otelcol")
fi
echo "$bin/otelcol"
