#!/usr/bin/env bash
# Builds kube-apiserver and etcd from Go modules for the Kubernetes test suite (issue 5) and caches
# them outside the clone, keyed by version. Prints the bin folder. Test-only: nothing here ships.
#
# `go install k8s.io/kubernetes/cmd/kube-apiserver@v` refuses the module (its go.mod replaces the
# staging modules with ./staging paths), so a tools module of ours requires k8s.io/kubernetes and
# turns each staging replace into a versioned one, generated from that version's own go.mod.
set -euo pipefail
KUBE_VERSION=${KUBE_VERSION:-v1.35.4}
ETCD_VERSION=${ETCD_VERSION:-v3.6.13}
here=$(cd "$(dirname "$0")" && pwd)
bin=${SBX_KUBE_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/sandbox-edge/kube/$KUBE_VERSION-etcd$ETCD_VERSION}
mkdir -p "$bin"
export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0

if [[ ! -x $bin/kube-apiserver ]]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  staging=v0.${KUBE_VERSION#v1.}
  major=1 minor=$(echo "$KUBE_VERSION" | cut -d. -f2)
  modfile=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  {
    echo "module sandbox-edge/tools/kube"
    echo
    echo "go $(go env GOVERSION | sed 's/^go//; s/\.[0-9]*$//')"
    echo
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    echo
    sed -nE "s#^\s*(k8s\.io/[a-z0-9-]+) => \./staging/src/k8s\.io/[a-z0-9-]+\$#replace \1 => \1 $staging#p" "$modfile"
  } >"$work/go.mod"
  cat >"$work/tools.go" <<'GO'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
GO
  (cd "$work" && go mod tidy -e >/dev/null 2>&1 || true; cd "$work" && go build -trimpath -ldflags="-s -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=$major -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean" -o "$bin/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver)
fi

if [[ ! -x $bin/etcd ]]; then
  work2=$(mktemp -d)
  printf 'module sandbox-edge/tools/etcd\n\ngo %s\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$(go env GOVERSION | sed 's/^go//; s/\.[0-9]*$//')" "$ETCD_VERSION" >"$work2/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' >"$work2/tools.go"
  (cd "$work2" && go mod tidy -e >/dev/null 2>&1 || true; cd "$work2" && go build -trimpath -ldflags=-s -o "$bin/etcd" go.etcd.io/etcd/server/v3)
  rm -rf "$work2"
fi
echo "$bin"
