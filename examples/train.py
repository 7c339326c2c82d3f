#!/usr/bin/env python3
"""A gpuq-aware training loop, standard library only.

The preemption protocol for job authors:
  1. gpuq starts the job with CUDA_VISIBLE_DEVICES (its GPUs), GPUQ_TASK_ID,
     GPUQ_CHECKPOINT_DIR (where to save) and GPUQ_NATS_URL; when the task
     resumes after a preemption, also GPUQ_RESUME_FROM (the checkpoint).
     On a cluster with credentials (gpuq auth init), GPUQ_NATS_CREDS is the
     run's own credential, a file only this job's user can read, good for
     this run's checkpoint and history and nothing else, and only while
     the run lasts; `gpuq checkpoint` picks it up from the environment.
  2. On preemption the job gets a signal (SIGUSR1 unless the task was
     submitted with --preempt-signal). It has the grace period (--grace,
     default 120 s) to save a checkpoint, report it with
     `gpuq checkpoint --ref REF`, and exit. After the grace period it gets
     SIGTERM, 10 s later SIGKILL, and the work since its last reported
     checkpoint is counted as lost.
  3. gpuq requeues the task at its original place in line; when it runs
     again, GPUQ_RESUME_FROM names the checkpoint to continue from.

Usage: train.py [--steps N] [--step-seconds S] [--checkpoint-every K]
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

preempted = False


def on_preempt(signum, frame):
    global preempted
    preempted = True  # finish the current step, then checkpoint and exit


def save(step, ckpt_dir):
    os.makedirs(ckpt_dir, exist_ok=True)
    path = os.path.join(ckpt_dir, "step-%d.json" % step)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"step": step, "task": os.environ.get("GPUQ_TASK_ID")}, f)
    os.replace(tmp, path)  # a checkpoint is complete or absent, never torn
    return path


def report(path, step):
    """Tell gpuq where the checkpoint is (the task id comes from GPUQ_TASK_ID;
    it goes through the task socket GPUQ_TASK_SOCKET, else over NATS with the
    credential, when there is one, from GPUQ_NATS_CREDS)."""
    gpuq = os.environ.get("GPUQ_BIN") or shutil.which("gpuq") or "gpuq"
    try:
        subprocess.run([gpuq, "checkpoint", "--ref", path, "--step", str(step)], check=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        print("could not report checkpoint %s: %s" % (path, e), file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--step-seconds", type=float, default=0.1)
    ap.add_argument("--checkpoint-every", type=int, default=0, help="also checkpoint every K steps (0: only on preemption)")
    args = ap.parse_args()

    signal.signal(signal.SIGUSR1, on_preempt)
    ckpt_dir = os.environ.get("GPUQ_CHECKPOINT_DIR", "./checkpoints")
    step = 0
    resume = os.environ.get("GPUQ_RESUME_FROM")
    if resume:
        with open(resume) as f:
            step = json.load(f)["step"]
        print("resuming from %s at step %d" % (resume, step), flush=True)
    print("GPUs: %s" % os.environ.get("CUDA_VISIBLE_DEVICES", ""), flush=True)

    while step < args.steps:
        time.sleep(args.step_seconds)  # one training step
        step += 1
        if args.checkpoint_every and step % args.checkpoint_every == 0:
            report(save(step, ckpt_dir), step)
        if preempted:
            path = save(step, ckpt_dir)
            report(path, step)
            print("preempted at step %d; checkpoint %s" % (step, path), flush=True)
            return 0
    print("done: %d steps" % step, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
