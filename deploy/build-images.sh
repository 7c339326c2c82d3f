#!/usr/bin/env bash
# Build the static binaries and the FROM-scratch images that
# deploy/compose.yaml runs:
#
#   gpuq/nats:$TAG       nats-server (Go module github.com/nats-io/nats-server/v2,
#                        the version the workspace pins), CGO_ENABLED=0
#   gpuq/submitter:$TAG  gpuq-submitter, CGO_ENABLED=0
#   gpuq/scheduler:$TAG  gpuq-scheduler, CGO_ENABLED=0
#   gpuq/advisor:$TAG    gpuq-advisor,   CGO_ENABLED=0
#   gpuq/notifier:$TAG   gpuq-notifier,  CGO_ENABLED=0
#   gpuq/agent:$TAG      gpuq-agent, static cgo build (mock GPUs only) + static busybox as /bin/sh
#
# Every image also holds /gpuq (static) for its health check, `gpuq health URL`.
#
# Needs: go, a C toolchain with static glibc (for the agent), docker, and a
# static busybox (Debian: apt-get install busybox-static). Nothing is pulled:
# every image starts FROM scratch.
#
# Environment: TAG (default dev), GO (go), DOCKER (docker), BUSYBOX
# (/bin/busybox), NATS_VERSION (v2.15.2; the build fails if the workspace
# pins another), OUT (build directory; default a temporary one, removed at
# the end; set it to keep the binaries).
set -euo pipefail

TAG=${TAG:-dev}
GO=${GO:-go}
DOCKER=${DOCKER:-docker}
BUSYBOX=${BUSYBOX:-/bin/busybox}
NATS_VERSION=${NATS_VERSION:-v2.15.2}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DOCKERFILES=$ROOT/deploy/docker

if [[ -n ${OUT:-} ]]; then
  mkdir -p "$OUT"
  OUT=$(cd "$OUT" && pwd)
else
  OUT=$(mktemp -d "${TMPDIR:-/tmp}/gpuq-images.XXXXXX")
  trap 'rm -rf "$OUT"' EXIT
fi

die() { echo "build-images: $*" >&2; exit 1; }

command -v "$GO" >/dev/null || die "$GO not found"
command -v "$DOCKER" >/dev/null || die "$DOCKER not found"
[[ -x $BUSYBOX ]] || die "no busybox at $BUSYBOX (Debian: apt-get install busybox-static, or set BUSYBOX=)"
if ldd "$BUSYBOX" >/dev/null 2>&1; then
  die "$BUSYBOX is dynamically linked; the agent image needs a static one (busybox-static)"
fi

cd "$ROOT"
have=$("$GO" list -m -f '{{.Version}}' github.com/nats-io/nats-server/v2)
[[ $have == "$NATS_VERSION" ]] || die "the workspace pins nats-server $have, expected $NATS_VERSION (set NATS_VERSION to accept it)"

build() { # dir binary package [go build flags...]
  local dir=$OUT/$1 bin=$2 pkg=$3
  shift 3
  mkdir -p "$dir"
  rm -f "$dir/$bin"
  echo "== go build $bin"
  "$GO" build -trimpath "$@" -o "$dir/$bin" "$pkg"
}
static='-s -w -buildid='

CGO_ENABLED=0 build nats nats-server github.com/nats-io/nats-server/v2 -ldflags "$static"
mkdir -p "$OUT/nats/data"
for s in submitter scheduler advisor notifier; do
  CGO_ENABLED=0 build "$s" "gpuq-$s" "./services/$s/cmd/gpuq-$s" -ldflags "$static"
done
# go-nvml needs cgo. A static glibc link warns that dlopen/getaddrinfo need
# the shared libraries at run time: expected. NVML cannot load in this binary
# (the agent falls back to mock GPUs), and netgo/osusergo keep name lookups
# in Go.
CGO_ENABLED=1 CGO_CFLAGS=${CGO_CFLAGS:--Wno-deprecated-declarations} \
  build agent gpuq-agent ./services/gpuagent/cmd/gpuq-agent -tags netgo,osusergo \
  -ldflags "$static -linkmode external -extldflags \"-static\"" 2>&1 |
  grep -v -e 'statically linked applications requires at runtime' -e ': in function .*Cfunc_dlopen' -e '^# ' || true
[[ -x $OUT/agent/gpuq-agent ]] || die "the agent did not build"
cp "$BUSYBOX" "$OUT/agent/busybox"
# gpuq itself, for the images' health checks (`gpuq health URL`: scratch has
# no shell or curl); static like the agent, since it links the agent too.
CGO_ENABLED=1 CGO_CFLAGS=${CGO_CFLAGS:--Wno-deprecated-declarations} \
  build gpuq gpuq ./cmd/gpuq -tags netgo,osusergo \
  -ldflags "$static -linkmode external -extldflags \"-static\"" 2>&1 |
  grep -v -e 'statically linked applications requires at runtime' -e ': in function .*Cfunc_dlopen' -e '^# ' || true
[[ -x $OUT/gpuq/gpuq ]] || die "gpuq did not build"
for img in nats submitter scheduler advisor notifier agent; do cp "$OUT/gpuq/gpuq" "$OUT/$img/gpuq"; done

for b in "$OUT"/nats/nats-server "$OUT"/*/gpuq-* "$OUT"/gpuq/gpuq; do
  if ldd "$b" >/dev/null 2>&1; then die "$b is not statically linked"; fi
done

# Without the buildx plugin, the legacy builder (it pulls nothing for FROM scratch).
if ! "$DOCKER" buildx version >/dev/null 2>&1; then export DOCKER_BUILDKIT=0; fi
for img in nats submitter scheduler advisor notifier agent; do
  echo "== docker build gpuq/$img:$TAG"
  "$DOCKER" build -q -t "gpuq/$img:$TAG" -f "$DOCKERFILES/$img.Dockerfile" "$OUT/$img" 2> >(grep -v -e 'legacy builder is deprecated' -e 'BuildKit is currently disabled' -e 'environment-variable\.' -e '^$' >&2)
done
"$DOCKER" images --format '{{.Repository}}:{{.Tag}}\t{{.Size}}' | grep "^gpuq/.*:$TAG\b" || true
