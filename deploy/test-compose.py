#!/usr/bin/env python3
"""make test-compose: deploy/compose.yaml under faults.

Brings the stack up (three NATS servers at R3, two schedulers, the
advisor, the submitter, two mock-GPU agents) in a compose project of its
own, then:

 1. submits 50 tasks over HTTP (2 GPUs each, a few seconds of work);
 2. kills the leading scheduler (SIGKILL) and measures how long the
    standby took to dispatch again (failover_s, from its metrics);
 3. kills one NATS server (SIGKILL): the stack keeps working;
 4. kills an agent while it runs tasks: once the scheduler has declared
    its node lost, its tasks are requeued and run on the other node;
 5. restarts what was killed and waits for every task;
 6. asserts that each task completed exactly once and no task ever had
    two runs at once, that every service's /metrics answers (and passes
    `promtool check metrics` where promtool is installed), and that
    `gpuq audit verify` is ok;
 7. tears everything down (down -v), also on failure.

It prints `failover_s=... lost=N doubled=N` and exits 1 unless both are 0.

The Docker engine may be shared (other checkouts, other sessions): the
images get a tag and the stack a compose project of this checkout's own
(derived from its path), and the host ports are free ones picked at start.

Environment: COMPOSE (docker-compose), PROJECT (gpuq-test-<checkout>),
GPUQ_TAG (test-<checkout>), BUILD (auto: build the images when one is
missing; 1: always; 0: never), GPUQ (bin/gpuq, built when missing), TASKS
(50), KEEP=1 leaves the stack up.
"""

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKOUT = hashlib.sha1(ROOT.encode()).hexdigest()[:8]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


COMPOSE = os.environ.get("COMPOSE", "docker-compose").split()
PROJECT = os.environ.get("PROJECT", f"gpuq-test-{CHECKOUT}")
TAG = os.environ.setdefault("GPUQ_TAG", f"test-{CHECKOUT}")
os.environ.setdefault("NATS_TAG", TAG)
HTTP_PORT = os.environ.setdefault("GPUQ_HTTP_PORT", free_port())
NATS_PORT = os.environ.setdefault("GPUQ_NATS_PORT", free_port())
os.environ.setdefault("GPUQ_NATS_MONITOR_PORT", free_port())
NODE_TIMEOUT = int(os.environ.setdefault("GPUQ_NODE_TIMEOUT", "10s").rstrip("s"))
API = f"http://127.0.0.1:{HTTP_PORT}"
TASKS = int(os.environ.get("TASKS", "50"))
GPUQ = os.environ.get("GPUQ", os.path.join(ROOT, "bin", "gpuq"))
SERVICES = ["submitter", "scheduler-1", "scheduler-2", "advisor", "notifier", "agent-1", "agent-2"]
IMAGES = ["nats", "submitter", "scheduler", "advisor", "notifier", "agent"]
T0 = time.time()


def say(msg):
    print(f"test-compose [{time.time() - T0:6.1f}s]: {msg}", flush=True)


class Fail(Exception):
    pass


def dc(*args, check=True, capture=False):
    cmd = COMPOSE + ["-p", PROJECT, "-f", os.path.join(ROOT, "deploy", "compose.yaml")] + list(args)
    r = subprocess.run(cmd, stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
                       stderr=subprocess.STDOUT if capture else subprocess.DEVNULL, text=True)
    if check and r.returncode != 0:
        raise Fail(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stdout or ''}")
    return r.stdout or ""


def http(method, url, body=None, timeout=5):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        raw = resp.read().decode()
    return raw


def api(method, path, body=None):
    return json.loads(http(method, API + path, body))


def tasks():
    return {t["task_id"]: t for t in api("GET", "/v1/tasks?all=true")}


def wait(what, timeout, ok, every=0.5):
    deadline = time.time() + timeout
    while True:
        try:
            v = ok()
            if v:
                return v
        except (urllib.error.URLError, ConnectionError, OSError, ValueError, KeyError, TimeoutError):
            pass
        if time.time() > deadline:
            raise Fail(f"{what}: not within {timeout} s")
        time.sleep(every)


def metrics_port(svc):
    out = dc("port", svc, "9090", capture=True).strip()
    return out.rsplit(":", 1)[-1] if out else ""


def metrics(svc):
    if svc == "submitter":
        return http("GET", API + "/metrics")
    return http("GET", f"http://127.0.0.1:{metrics_port(svc)}/metrics")


def sample(text, name, labels=None):
    """Sum of the samples of name whose labels include labels."""
    total, seen = 0.0, False
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if not m or m.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(have.get(k) == v for k, v in (labels or {}).items()):
            total, seen = total + float(m.group(3)), True
    return total if seen else None


def leader():
    for s in ("scheduler-1", "scheduler-2"):
        if sample(metrics(s), "gpuq_scheduler_leader") == 1:
            return s
    return None


def build():
    mode = os.environ.get("BUILD", "auto")
    missing = any(subprocess.run(["docker", "image", "inspect", f"gpuq/{i}:{TAG}"], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL).returncode != 0 for i in IMAGES)
    if mode == "1" or (mode == "auto" and missing):
        say("building the images (deploy/build-images.sh)")
        subprocess.run([os.path.join(ROOT, "deploy", "build-images.sh")], check=True, env=dict(os.environ, TAG=TAG))
    elif missing:
        raise Fail(f"images gpuq/*:{TAG} missing and BUILD=0")
    if not os.access(GPUQ, os.X_OK):
        say(f"building {GPUQ}")
        subprocess.run(["go", "build", "-o", GPUQ, "./cmd/gpuq"], cwd=ROOT, check=True)


def healthy(svc):
    cid = dc("ps", "-q", svc, capture=True).strip()
    if not cid:
        return False
    st = subprocess.run(["docker", "inspect", "-f", "{{.State.Health.Status}}", cid], stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL, text=True).stdout.strip()
    return st == "healthy"


def history(tid):
    # Each history is a filtered read of the log: slow on a busy machine.
    for attempt in range(3):
        try:
            return json.loads(http("GET", f"{API}/v1/tasks/{tid}/history", timeout=30))
        except (urllib.error.URLError, TimeoutError, OSError):
            if attempt == 2:
                raise
            time.sleep(1)


def judge(ids):
    """lost: tasks not completed; doubled: tasks completed more than once
    or with two runs at once (a start while a run was live)."""
    lost, doubled = [], []
    for tid in ids:
        h = history(tid)
        done = sum(1 for e in h if e["type"] == "completed")
        live, twice = False, False
        for e in h:
            if e["type"] == "started":
                twice |= live
                live = True
            elif e["type"] in ("preempted", "requeued", "completed", "failed"):
                live = False
        if done == 0:
            lost.append(tid)
        if done > 1 or twice:
            doubled.append(tid)
    return lost, doubled


def run():
    build()
    try:
        http("GET", API + "/healthz", timeout=2)
        raise Fail(f"something already answers on {API}; stop it or set GPUQ_HTTP_PORT")
    except urllib.error.URLError:
        pass
    say(f"up -d (project {PROJECT}, node timeout {NODE_TIMEOUT}s)")
    dc("up", "-d")
    wait("every service healthy", 180, lambda: all(healthy(s) for s in SERVICES + ["nats-1", "nats-2", "nats-3"]), 1)
    wait("two nodes up", 60, lambda: len([n for n in api("GET", "/v1/nodes") if n.get("state") in ("ready", "up")]) == 2)
    say("stack healthy: 3 NATS servers, 2 schedulers, advisor, notifier, submitter, 2 agents")

    # 1. 50 tasks.
    ids = []
    for i in range(TASKS):
        r = api("POST", "/v1/tasks", {"name": f"t{i:02d}", "team": ["vision", "nlp"][i % 2], "priority": "medium",
                                      "gpus": 2, "hours": 0.01, "hypothesis": "compose under faults",
                                      "command": "sleep 5", "idempotency_key": f"compose-{i}"})
        ids.append(r["task_id"])
    say(f"submitted {len(ids)} tasks (2 GPUs, 5 s each; 16 GPUs)")
    wait("the first tasks running", 60, lambda: sum(t["state"] == "running" for t in tasks().values()) >= 4)

    # 2. Kill the leading scheduler.
    lead = wait("a leading scheduler", 30, leader)
    standby = "scheduler-2" if lead == "scheduler-1" else "scheduler-1"
    say(f"kill -9 {lead} (leader); {standby} stands by")
    dc("kill", "-s", "SIGKILL", lead)
    killed = time.time()
    wait(f"{standby} dispatching", 60,
         lambda: (sample(metrics(standby), "gpuq_scheduler_decisions_total", {"type": "dispatched"}) or 0) > 0, 0.1)
    failover = time.time() - killed
    say(f"{standby} dispatched {failover:.1f} s after the kill")
    dc("start", lead)

    # 3. Kill one NATS server (not nats-1: the host's CLI talks to it).
    done_before = sum(t["state"] == "completed" for t in tasks().values())
    say("kill -9 nats-2")
    dc("kill", "-s", "SIGKILL", "nats-2")
    wait("tasks completing with nats-2 down", 90,
         lambda: sum(t["state"] == "completed" for t in tasks().values()) >= done_before + 4)
    say("tasks complete with nats-2 down; starting it again")
    dc("start", "nats-2")

    # 4. Kill an agent mid-task; restart it once its node is lost.
    def running_on(node):
        return [t for t in tasks().values() if t["state"] == "running" and t.get("node") == node]
    wait("a task running on node-2", 90, lambda: running_on("node-2"), 0.2)
    victims = [t["task_id"] for t in running_on("node-2")]
    say(f"kill -9 agent-2 while it runs {len(victims)} tasks")
    dc("kill", "-s", "SIGKILL", "agent-2")
    wait("node-2 declared lost", NODE_TIMEOUT + 60,
         lambda: any(n["node"] == "node-2" and n["state"] == "lost" for n in api("GET", "/v1/nodes")))
    say("node-2 lost: its tasks requeued; starting agent-2 again")
    dc("start", "agent-2")

    # 5. Every task.
    def finished():
        ts = tasks()
        return all(ts[i]["state"] in ("completed", "failed", "cancelled") for i in ids)
    wait("every task finished", 300, finished, 1)
    wait("every service healthy again", 120, lambda: all(healthy(s) for s in SERVICES), 1)
    say("every task finished; every service healthy")

    # 6. Judge.
    lost, doubled = judge(ids)
    for v in victims:
        if v in lost:
            say(f"victim {v} of the agent kill did not complete")
    promtool = shutil.which("promtool")
    for s in SERVICES:
        text = metrics(s)
        if "gpuq_fold_ready" not in text:
            raise Fail(f"{s}: /metrics lacks gpuq_fold_ready")
        if promtool:
            r = subprocess.run([promtool, "check", "metrics"], input=text, text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
            if r.returncode != 0:
                raise Fail(f"{s}: promtool check metrics:\n{r.stdout}")
    say("every service's /metrics answers" + (" and passes promtool check metrics" if promtool else
                                              " (promtool not installed: not checked)"))
    r = subprocess.run([GPUQ, "audit", "verify"], env=dict(os.environ, GPUQ_NATS_URL=f"nats://127.0.0.1:{NATS_PORT}"),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(r.stdout.strip()[-1500:])
    if r.returncode != 0:
        raise Fail("gpuq audit verify: not ok")
    say("gpuq audit verify: ok")
    print(f"failover_s={failover:.1f} lost={len(lost)} doubled={len(doubled)}", flush=True)
    if lost or doubled:
        raise Fail(f"lost {lost}, doubled {doubled}")


def main():
    ok = False
    try:
        run()
        ok = True
    except Exception as e:  # anything: report, then tear down

        print(f"test-compose: FAIL: {e}", file=sys.stderr, flush=True)
        # Every service's last lines, each service capped, so one chatty
        # service cannot push the others out of a CI log's tail; the
        # reason again at the very end.
        for svc in dc("ps", "--services", check=False, capture=True).split():
            out = dc("logs", "--no-color", "--tail", "12", svc, check=False, capture=True)
            print(f"--- {svc} (last lines)\n{out[-3000:]}", file=sys.stderr)
        print(dc("ps", check=False, capture=True), file=sys.stderr)
        print(f"test-compose: FAIL: {e}", file=sys.stderr, flush=True)
    finally:
        if os.environ.get("KEEP") != "1":
            say("down -v")
            dc("down", "-v", "--remove-orphans", check=False)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
