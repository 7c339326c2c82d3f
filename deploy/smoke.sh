#!/usr/bin/env bash
# Compose smoke test: start deploy/compose.yaml, submit one task through the
# HTTP API, wait for it to reach `completed`, check what it printed (its
# CUDA_VISIBLE_DEVICES: two mock GPU UUIDs), then tear the stack down with
# its volumes.
#
# Environment: BUILD (auto: build the images when one is missing; 1: always;
# 0: never), COMPOSE (docker-compose), PROJECT (gpuq-smoke: its own compose
# project, so it never touches a stack started with `make compose-up`),
# GPUQ_HTTP_PORT (8080), GPUQ_NATS_PORT (4222), GPUQ_NATS_MONITOR_PORT (8222),
# GPUQ_TAG (dev), KEEP=1 leaves the stack running.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
COMPOSE=${COMPOSE:-docker-compose}
PROJECT=${PROJECT:-gpuq-smoke}
BUILD=${BUILD:-auto}
export GPUQ_TAG=${GPUQ_TAG:-dev}
export GPUQ_HTTP_PORT=${GPUQ_HTTP_PORT:-8080}
API=http://127.0.0.1:$GPUQ_HTTP_PORT
dc() { $COMPOSE -p "$PROJECT" -f "$ROOT/deploy/compose.yaml" "$@"; }
say() { echo "smoke: $*"; }
fail() {
  echo "smoke: FAIL: $*" >&2
  dc ps >&2 || true
  dc logs --no-color --tail 40 >&2 || true
  exit 1
}

if curl -s -o /dev/null --max-time 2 "$API/healthz"; then
  fail "something already answers on $API (a running stack?); stop it or set GPUQ_HTTP_PORT"
fi

missing=0
for img in nats submitter scheduler advisor notifier agent; do
  docker image inspect "gpuq/$img:$GPUQ_TAG" >/dev/null 2>&1 || missing=1
done
if [[ $BUILD == 1 || ($BUILD == auto && $missing == 1) ]]; then
  TAG=$GPUQ_TAG "$ROOT/deploy/build-images.sh"
elif [[ $missing == 1 ]]; then
  fail "images gpuq/*:$GPUQ_TAG missing and BUILD=0"
fi

if [[ ${KEEP:-0} != 1 ]]; then
  trap 'say "down -v"; dc down -v --remove-orphans >/dev/null 2>&1 || true' EXIT
fi
say "up -d (project $PROJECT)"
dc up -d

say "waiting for $API/healthz"
for i in $(seq 1 90); do
  curl -fsS --max-time 2 "$API/healthz" >/dev/null 2>&1 && break
  [[ $i == 90 ]] && fail "the submitter was not healthy within 90 s"
  sleep 1
done

body='{"name":"x","team":"a","priority":"high","gpus":2,"hours":0.1,"hypothesis":"h","command":"echo $CUDA_VISIBLE_DEVICES"}'
rep=$(curl -sS --max-time 10 -XPOST "$API/v1/tasks" -H "Content-Type: application/json" -d "$body") || fail "submit: $rep"
id=$(sed -n 's/.*"task_id":"\([^"]*\)".*/\1/p' <<<"$rep")
[[ -n $id ]] || fail "submit answered no task_id: $rep"
say "submitted $id"

state=
for i in $(seq 1 120); do
  show=$(curl -sS --max-time 5 "$API/v1/tasks/$id") || show=
  state=$(sed -n 's/.*"state":"\([^"]*\)".*/\1/p' <<<"$show")
  case $state in
    completed) break ;;
    failed | cancelled) fail "task $id ended $state: $show" ;;
  esac
  [[ $i == 120 ]] && fail "task $id is still '$state' after 60 s: $show"
  sleep 0.5
done
node=$(sed -n 's/.*"node":"\([^"]*\)".*/\1/p' <<<"$show")
say "task $id completed on $node"

# The task's output, from the agent that ran it (node-N runs as agent-N).
out=$(dc exec -T "agent-${node#node-}" cat "/var/lib/gpuq/agent/tasks/$id/output.log" 2>/dev/null) ||
  fail "could not read the output of $id on agent-${node#node-}"
say "output: $out"
[[ $out =~ ^GPU-[0-9a-f-]+,GPU-[0-9a-f-]+$ ]] || fail "expected two GPU UUIDs in CUDA_VISIBLE_DEVICES, got: $out"
say "PASS"
