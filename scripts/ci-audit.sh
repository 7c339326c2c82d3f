#!/usr/bin/env bash
# .ci/run's last contract step: gpuq audit verify on a log made by a
# short gpuq dev session of its own (the contract checks of ../shared
# delete their data directories when they end, so their logs cannot be
# verified afterwards). The session runs what the contracts exercise —
# tasks run to completion, a CRITICAL task preempting a LOW one that is
# requeued and runs again, a cancellation — then:
#   1. gpuq audit verify --json: ok, no violation, and the live
#      scheduler's digest equal to the replay's ("live": "match");
#   2. gpuq dev stopped and started again on the same data directory
#      (every service restores from its snapshot): verify again, ok and
#      live match;
#   3. gpuq audit export → gpuq audit verify --file: ok, and the same
#      digest as the live log's for the same events.
# Usage: scripts/ci-audit.sh [bin/gpuq]. Needs python3 and curl.
set -euo pipefail
GPUQ=${1:-bin/gpuq}
[ -x "$GPUQ" ] || { echo "ci-audit: $GPUQ missing (make build)"; exit 1; }
TMP=$(mktemp -d)
DEV_PID=
cleanup() { [ -n "$DEV_PID" ] && kill "$DEV_PID" 2>/dev/null && wait "$DEV_PID" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
fail() { { echo "ci-audit: FAIL: $*"; [ -f "$TMP/dev.log" ] && tail -20 "$TMP/dev.log"; echo "ci-audit: FAIL: $*"; } >&2; exit 1; }
freeport() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
NATS_PORT=$(freeport); HTTP_PORT=$(freeport)
NATS_URL=nats://127.0.0.1:$NATS_PORT
start_dev() {
  "$GPUQ" dev --data "$TMP/data" --nats-port "$NATS_PORT" --http "127.0.0.1:$HTTP_PORT" --nodes 2 --gpus 4 >>"$TMP/dev.log" 2>&1 &
  DEV_PID=$!
  for _ in $(seq 1 150); do
    curl -fsS "http://127.0.0.1:$HTTP_PORT/healthz" >/dev/null 2>&1 && return 0
    kill -0 "$DEV_PID" 2>/dev/null || fail "gpuq dev exited"
    sleep 0.2
  done
  fail "gpuq dev not healthy in 30 s"
}
stop_dev() { kill -TERM "$DEV_PID"; wait "$DEV_PID" 2>/dev/null || true; DEV_PID=; }
gq() { "$GPUQ" "$@" --nats "$NATS_URL"; }
jget() { python3 -c "import json,sys; d=json.loads(sys.argv[1]); print($2)" "$1"; }
submit() { gq submit --team ci --hypothesis "ci audit" --json "$@" | python3 -c 'import json,sys; print(json.load(sys.stdin)["task_id"])'; }
state() { jget "$(gq show "$1" --json)" 'd["state"]'; }
wait_state() {
  for _ in $(seq 1 $(( $3 * 5 ))); do [ "$(state "$1" 2>/dev/null)" = "$2" ] && return 0; sleep 0.2; done
  fail "task $1 not $2 after $3 s (is $(state "$1" 2>/dev/null || echo unknown))"
}
# verify: gpuq audit verify --json until the live scheduler's digest is
# there (a scheduler that just started publishes it within a second or
# two); prints the report. Not ok, or a mismatch, fails at once.
verify() {
  local v live="" deadline=$((SECONDS + 60))
  while [ $SECONDS -lt $deadline ]; do
    v=$(gq audit verify --json) || fail "audit verify exit code $?: $v"
    jget "$v" 'd["ok"] is True and d["violations"] == [] and d["deny_delete"] and d["deny_purge"]' | grep -qx True || fail "audit verify: $v"
    live=$(jget "$v" 'd["live"]')
    case $live in
      match) echo "$v"; return 0 ;;
      mismatch) fail "the live scheduler's digest differs from the replay's: $v" ;;
    esac
    sleep 0.5
  done
  fail "no live scheduler digest within 60 s (last: $live)"
}

start_dev
low=$(submit --name low --priority low --gpus 4 --hours 0.01 --grace 2s --command "sleep 4")
a=$(submit --name a --priority medium --gpus 4 --hours 0.01 --command "sleep 1")
wait_state "$low" running 30
crit=$(submit --name crit --priority critical --gpus 4 --hours 0.01 --no-preempt --command "sleep 1")
gone=$(submit --name gone --priority low --gpus 8 --hours 0.01 --command "sleep 1")
gq cancel "$gone" >/dev/null || fail "cancel"
for id in "$a" "$crit" "$low"; do wait_state "$id" completed 90; done
jget "$(gq history "$low" --json)" '"preempted" in [e["type"] for e in d] or "requeued" in [e["type"] for e in d]' | grep -qx True ||
  echo "ci-audit: note: $low was not preempted (the critical task found free GPUs)"
v1=$(verify)
echo "ci-audit: verify ok, live scheduler matches the replay: $(jget "$v1" 'd["events"]') events, digest $(jget "$v1" 'd["digest"]'[:16])…"

stop_dev
start_dev
v2=$(verify)
echo "ci-audit: after a restart from snapshots: verify ok, live match at seq $(jget "$v2" 'd["live_digest_seq"]')"
grep -q "state from snapshot" "$TMP/dev.log" || echo "ci-audit: note: no service logged a restore from its snapshot"

gq audit export > "$TMP/events.jsonl" || fail "audit export"
v3=$("$GPUQ" audit verify --file "$TMP/events.jsonl" --json) || fail "verify --file: $v3"
v4=$(gq audit verify --json) || fail "audit verify: $v4"
if [ "$(jget "$v3" 'd["events"]')" = "$(jget "$v4" 'd["events"]')" ]; then
  [ "$(jget "$v3" 'd["digest"]')" = "$(jget "$v4" 'd["digest"]')" ] || fail "the archive's digest differs from the live log's"
fi
stop_dev
echo "ci-audit: audit verify ok on the session's log, live and after a restart; the archive verifies offline"
