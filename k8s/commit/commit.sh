#!/bin/sh
# Entrypoint of the commit image (`--commit-image`): the Commit controller's Job runs it on the
# node that holds the container, with the node's containerd socket mounted.
#   commit.sh <containerd container id> <image to push> <squash layers>
# Every argument is data: quoted, never evaluated. On success the pushed digest (sha256:…) is the
# container's termination message, which the controller reads as the Commit's commitID; on failure
# the log tail stands in for it (terminationMessagePolicy FallbackToLogsOnError).
set -eu
id=$1
image=$2
squash=${3:-0}
ns=${CONTAINERD_NAMESPACE:-k8s.io}
auth=${COMMIT_AUTH_DIR:-/var/run/commit-auth}

if [ "$squash" != 0 ]; then
  echo "squashLayer $squash: this commit image does not squash layers" >&2
  exit 2
fi

nerdctl -n "$ns" commit --pause=true -- "$id" "$image"

# Each registryAuth Secret in turn (the first that the registry accepts), else no credentials.
pushed=
for dir in "$auth"/*/; do
  [ -f "$dir/config.json" ] || continue
  if DOCKER_CONFIG=$dir nerdctl -n "$ns" push -- "$image"; then pushed=1; break; fi
done
[ -n "$pushed" ] || nerdctl -n "$ns" push -- "$image"

ref=$(nerdctl -n "$ns" image inspect --format '{{index .RepoDigests 0}}' -- "$image")
printf '%s\n' "${ref#*@}" > /dev/termination-log
