#!/usr/bin/env python3
"""A gpuq-aware training loop, standard library only, on the gpuq client.

The preemption protocol for job authors (docs/training.md has it whole):
  1. gpuq starts the job with CUDA_VISIBLE_DEVICES (its GPUs), GPUQ_TASK_ID,
     GPUQ_TASK_SOCKET (the task socket: no NATS credential needed) and
     GPUQ_CHECKPOINT_DIR (where to save); when the task resumes after a
     preemption, also GPUQ_RESUME_FROM (the checkpoint).
  2. On preemption every process of the job gets a signal (SIGUSR1 unless
     the task was submitted with --preempt-signal). The job has the grace
     period (--grace, default 120 s) to save a checkpoint, report it, and
     exit. After the grace period SIGTERM, later SIGKILL, and the work since
     its last reported checkpoint is counted as lost.
  3. gpuq requeues the task at its original place in line; when it runs
     again, task.resume_from names the checkpoint to continue from.

gpuq.current() does the listening: task.should_checkpoint() is a flag set by
its handler of the preemption signal and by a long-poll of the task socket;
task.checkpoint_committed(path, step) reports a checkpoint (through the
socket, else with `gpuq checkpoint`, which honours GPUQ_BIN). Outside gpuq,
current() is None and the loop just runs. For a real model see
examples/pytorch/train.py.

Usage: train.py [--steps N] [--step-seconds S] [--checkpoint-every K]
"""
import argparse
import json
import os
import sys
import time

try:
    import gpuq
except ImportError:  # run from a checkout: the client is in python/
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import gpuq


def save(step, ckpt_dir):
    """Write the checkpoint, fsync it, rename it into place: it is complete
    or absent, never torn."""
    os.makedirs(ckpt_dir, exist_ok=True)
    path = os.path.join(ckpt_dir, "step-%d.json" % step)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"step": step, "task": os.environ.get("GPUQ_TASK_ID")}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def report(task, path, step):
    """Tell gpuq the checkpoint is committed; a failure to report is logged,
    not fatal (the checkpoint is on disk, the next report carries on)."""
    if task is None:
        return
    try:
        task.checkpoint_committed(path, step=step)
    except Exception as e:  # refused (gpuq.GpuqError), or the gpuq CLI missing or timing out
        print("could not report checkpoint %s: %s" % (path, e), file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--step-seconds", type=float, default=0.1)
    ap.add_argument("--checkpoint-every", type=int, default=0, help="also checkpoint every K steps (0: only on preemption)")
    args = ap.parse_args()

    task = gpuq.current()  # None outside gpuq
    ckpt_dir = (task and task.checkpoint_dir) or os.environ.get("GPUQ_CHECKPOINT_DIR") or "./checkpoints"
    step = 0
    if task is not None and task.resume_from:
        with open(task.resume_from) as f:
            step = json.load(f)["step"]
        print("resuming from %s at step %d (attempt %d)" % (task.resume_from, step, task.attempt), flush=True)
    print("GPUs: %s" % os.environ.get("CUDA_VISIBLE_DEVICES", ""), flush=True)

    while step < args.steps:
        time.sleep(args.step_seconds)  # one training step
        step += 1
        if task is not None and step % 10 == 0:
            task.report_progress(step, args.steps)
        if args.checkpoint_every and step % args.checkpoint_every == 0:
            report(task, save(step, ckpt_dir), step)
        if task is not None and task.should_checkpoint():
            path = save(step, ckpt_dir)
            report(task, path, step)
            p = task.preemption
            print("preempted at step %d (%s); checkpoint %s" % (step, p.reason, path), flush=True)
            return 0
    print("done: %d steps" % step, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
