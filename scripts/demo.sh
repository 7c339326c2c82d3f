#!/usr/bin/env bash
# make run: start `gpuq dev`, submit a small demo once it is healthy, keep running.
set -euo pipefail
DATA=${1:-}; PORT=${2:-4322}; HTTP=${3:-127.0.0.1:8180}; AUTH=${4:-}
# A data directory holds one log, of one auth mode (gpuq dev refuses
# another): with credentials the demo keeps its own.
[ -n "$DATA" ] || DATA=./.gpuq-demo${AUTH:+-withauth}
export GPUQ_NATS_URL=nats://127.0.0.1:$PORT
authflag=(); curlauth=""
if [ -n "$AUTH" ]; then   # make run AUTH=DIR: credentials per role (docs/operations.md, Security)
  [ -d "$AUTH/creds" ] || bin/gpuq auth init "$AUTH" --teams vision,nlp --nodes node-1,node-2 >/dev/null
  authflag=(--auth "$AUTH"); curlauth="-H \"Authorization: Bearer \$(cat $AUTH/tokens/admin)\" "
fi
bin/gpuq dev --data "$DATA" --nats-port "$PORT" --http "$HTTP" --gpus 8 --nodes 2 "${authflag[@]}" &
DEV=$!
# Ctrl-C (or kill) stops gpuq dev cleanly and ends make run with exit 0.
stop() { trap - EXIT INT TERM; kill -INT $DEV 2>/dev/null; wait $DEV 2>/dev/null || true; exit 0; }
trap stop INT TERM
trap 'kill $DEV 2>/dev/null || true' EXIT
for _ in $(seq 1 150); do curl -fsS "http://$HTTP/healthz" >/dev/null 2>&1 && break; sleep 0.2; done
sub() { GPUQ_NATS_CREDS=${AUTH:+$AUTH/creds/ci-$1.creds} bin/gpuq submit --team "$1" --priority "$2" --gpus "$3" --hours "$4" --name "$5" --hypothesis "$6" --command "$7"; }
echo
echo "== submitting a small demo"
a=$(sub vision critical 8 0.01 baseline-resnet "the baseline reproduces 76% top-1" 'echo "GPUs: $CUDA_VISIBLE_DEVICES"; sleep 20')
b=$(sub nlp high 4 0.01 lr-sweep "lr 3e-4 beats 1e-4" 'echo "GPUs: $CUDA_VISIBLE_DEVICES"; sleep 15')
c=$(sub nlp medium 8 0.01 long-context "8k context helps QA" 'sleep 10')
d=$(sub vision low 2 0.01 rerun-seed "seed 2 confirms the result" 'sleep 5')
cat <<MSG

Submitted: $a $b $c $d  (16 mock GPUs on 2 nodes)
Watch them:
  export GPUQ_NATS_URL=$GPUQ_NATS_URL${AUTH:+ GPUQ_NATS_CREDS=$AUTH/creds/admin.creds}
  bin/gpuq queue                 # what is waiting and running
  bin/gpuq watch $c      # one task's events as they happen
  bin/gpuq estimate $c   # when it starts, why it waits, what to do meanwhile
  bin/gpuq history $a --json
  bin/gpuq logs -f $a     # its output, from its node
  curl -s ${curlauth}http://$HTTP/v1/tasks | python3 -m json.tool
Ctrl-C stops gpuq dev; \`make run\` again continues from $DATA.
MSG
wait $DEV || true
