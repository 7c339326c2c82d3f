#!/usr/bin/env bash
# make check-metrics: run `gpuq dev` (2 mock nodes) on a data directory and
# ports of its own, run a task, and check its /metrics (every service's
# metrics, on one registry) with `promtool check metrics`. Without promtool
# (Debian: apt-get install prometheus) it says so and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v promtool >/dev/null; then
  echo "check-metrics: skipped: promtool not installed (Debian: apt-get install prometheus)"
  exit 0
fi
GPUQ=${GPUQ:-bin/gpuq}
dir=$(mktemp -d "${TMPDIR:-/tmp}/gpuq-metrics.XXXXXX")
port=$(( 20000 + RANDOM % 20000 )); http=127.0.0.1:$(( port + 1 ))
# --webhook runs the notifier too; nothing listens there, so its notices
# are recorded and retried.
"$GPUQ" dev --data "$dir" --nats-port "$port" --http "$http" --nodes 2 --gpus 4 \
  --webhook "http://127.0.0.1:$(( port + 2 ))/hook" >"$dir/dev.log" 2>&1 &
dev=$!
trap 'kill -INT $dev 2>/dev/null; wait $dev 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 1 150); do "$GPUQ" health "http://$http/healthz" >/dev/null 2>&1 && break; sleep 0.2; done
"$GPUQ" health "http://$http/healthz"
export GPUQ_NATS_URL=nats://127.0.0.1:$port
id=$("$GPUQ" submit --team vision --priority high --gpus 2 --hours 0.01 --name metrics-check \
  --hypothesis "metrics are valid" --command 'true')
for _ in $(seq 1 100); do "$GPUQ" show "$id" | grep -q 'completed' && break; sleep 0.2; done
# The queue and cluster gauges read a summary the submitter's fold
# publishes once a second (never its lock): a scrape may be a second
# behind, so the first after the task's end is retried for a few seconds.
want="gpuq_tasks gpuq_gpus_free gpuq_scheduler_pass_duration_seconds_bucket gpuq_fold_lag_seconds
  gpuq_scheduler_decisions_total gpuq_estimate_p90_coverage_ratio gpuq_scheduler_lease_epoch gpuq_nats_reconnects_total
  gpuq_notifications_total gpuq_notification_delivery_seconds_bucket gpuq_notifications_pending"
for try in $(seq 1 25); do
  curl -fsS "http://$http/metrics" >"$dir/metrics.txt"
  missing=""
  for m in $want; do grep -q "^$m" "$dir/metrics.txt" || missing="$missing $m"; done
  [ -z "$missing" ] && break
  sleep 0.2
done
[ -z "$missing" ] || { echo "check-metrics: missing:$missing"; exit 1; }
grep -q '^gpuq_tasks{.*state="completed"' "$dir/metrics.txt" || { echo "check-metrics: gpuq_tasks has no completed task"; exit 1; }
promtool check metrics <"$dir/metrics.txt"
echo "check-metrics: promtool check metrics ok ($(grep -c '^gpuq_' "$dir/metrics.txt") gpuq samples)"
