#!/usr/bin/python3
"""A small PyTorch model trained on CPU that yields to gpuq and resumes exactly.

    /usr/bin/python3 examples/pytorch/train.py --out DIR [--steps 300] [--seed 1]
    /usr/bin/python3 examples/pytorch/train.py --out DIR --nproc 2      # two ranks, gloo
    torchrun --nproc-per-node 2 examples/pytorch/train.py --out DIR     # the same, under torchrun

(Debian: `apt-get install python3-torch`, then /usr/bin/python3, the one
that sees it.) Inside a gpuq task it takes the task from gpuq.current():
resumes from task.resume_from, checks task.should_checkpoint() after every
step (with two ranks gpuq.torch.should_checkpoint_all, so both ranks stop at
the same step), saves a checkpoint atomically and reports it with
task.checkpoint_committed(path, step), then exits 0. Outside gpuq it just
trains. At the end it writes DIR/final.pt and DIR/final.sha256 (the SHA-256
of the state_dict's bytes, in key order) and prints the hash: a run that was
preempted and resumed ends with the same hash as one that was not.

What makes the resumed run bit-identical: one thread, deterministic
algorithms, a batch that is a function of (seed, step, rank), and a
checkpoint that holds the model, the optimizer (Adam's moments and step
counts) and each rank's RNG state (the dropout draws from it).
"""
import argparse
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

try:
    import gpuq
except ImportError:  # run from a checkout: the client is in python/
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    import gpuq


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="where the final weights go")
    ap.add_argument("--steps", type=int, default=300, help="training steps in all (default 300)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--nproc", type=int, default=1, help="ranks to start here (gloo on CPU); 1: no torch.distributed")
    ap.add_argument("--step-sleep", type=float, default=0.0,
                    help="seconds of extra work per step (stands in for a bigger model in tests and demos)")
    ap.add_argument("--log-every", type=int, default=10)
    return ap.parse_args(argv)


# -- launcher ----------------------------------------------------------------


def launch(args):
    """Start args.nproc ranks of this script, as torchrun would (RANK,
    WORLD_SIZE, MASTER_ADDR, MASTER_PORT), and wait for all of them.

    The preemption signal reaches every process of the task, this one too:
    it must not die of it (the ranks are checkpointing), so it is caught and
    ignored here; each rank handles its own (a caught signal's handler does
    not pass through exec, SIG_IGN would: so a no-op handler, not SIG_IGN)."""
    signal.signal(signal.SIGUSR1, lambda *_: None)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    procs = []
    for rank in range(args.nproc):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(args.nproc),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)] + sys.argv[1:], env=env))
    codes = [None] * len(procs)
    first_done = None
    while any(c is None for c in codes):
        for i, p in enumerate(procs):
            if codes[i] is None:
                codes[i] = p.poll()
                if codes[i] is not None and first_done is None:
                    first_done = time.monotonic()
                if codes[i] not in (None, 0):  # one rank failed: the others would wait for it forever
                    for q in procs:
                        if q.poll() is None:
                            q.terminate()
        if first_done is not None and time.monotonic() - first_done > 60 and any(c is None for c in codes):
            # One rank ended a minute ago and another has not: a rank stuck
            # in its teardown. End it, and fail (its code is not 0).
            print("launcher: rank(s) %s still running 60 s after another ended; terminating them" % (
                [i for i, c in enumerate(codes) if c is None],), file=sys.stderr, flush=True)
            for q in procs:
                if q.poll() is None:
                    q.terminate()
        time.sleep(0.05)
    return next((c for c in codes if c != 0), 0)


# -- training ----------------------------------------------------------------


def build(torch, seed):
    torch.manual_seed(seed)  # the same initial weights on every rank
    return torch.nn.Sequential(
        torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Dropout(0.1),
        torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))


def batch(torch, seed, step, rank, size=32):
    """The batch of (step, rank): a function of them, so a resumed run draws
    the same data without any loader state to save."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step * 101 + rank)
    x = torch.randn(size, 16, generator=g)
    w = torch.arange(64, dtype=torch.float32).reshape(16, 4) / 64
    y = torch.sin(x @ w) + 0.05 * torch.randn(size, 4, generator=g)
    return x, y


def weights_sha256(model):
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(torch, dist, ckpt_dir, step, rank, world, model, opt):
    """Write ckpt_dir/step-N/rank-R.pt for every rank, atomically as a whole:
    the ranks write into step-N.partial, rank 0 renames it once all have
    written and fsynced. Answers the committed directory."""
    final = os.path.join(ckpt_dir, "step-%d" % step)
    partial = final + ".partial"
    if rank == 0:
        os.makedirs(ckpt_dir, exist_ok=True)
        shutil.rmtree(partial, ignore_errors=True)  # left by a run killed while saving
        os.makedirs(partial)
    if world > 1:
        dist.barrier()
    path = os.path.join(partial, "rank-%d.pt" % rank)
    with open(path, "wb") as f:
        torch.save({"step": step, "rank": rank, "world": world, "model": model.state_dict(),
                    "optimizer": opt.state_dict(), "rng": torch.get_rng_state()}, f)
        f.flush()
        os.fsync(f.fileno())
    if world > 1:
        dist.barrier()
    if rank == 0:
        fsync_dir(partial)
        shutil.rmtree(final, ignore_errors=True)
        os.rename(partial, final)
        fsync_dir(ckpt_dir)
    if world > 1:
        dist.barrier()
    return final


def train(args):
    # First, before the slow import of torch: from here on the preemption
    # signal sets a flag instead of killing the process (its default action).
    task = gpuq.current()  # None outside gpuq
    import torch

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    dist = None
    if world > 1:
        import torch.distributed as dist

        dist.init_process_group("gloo", rank=rank, world_size=world)
    import gpuq.torch as gtorch

    model = build(torch, args.seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    torch.manual_seed(args.seed * 7919 + rank)  # this rank's dropout
    step = 0
    if task is not None and task.resume_from:
        ck = torch.load(os.path.join(task.resume_from, "rank-%d.pt" % rank))
        if ck["world"] != world:
            raise SystemExit("checkpoint %s has %d ranks, this run %d" % (task.resume_from, ck["world"], world))
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        torch.set_rng_state(ck["rng"])
        step = ck["step"]
        say("rank %d: resumed from %s at step %d (attempt %d)" % (rank, task.resume_from, step, task.attempt))
    net = model
    if world > 1:
        net = torch.nn.parallel.DistributedDataParallel(model)
    loss_fn = torch.nn.MSELoss()
    ckpt_dir = (task.checkpoint_dir if task is not None else None) or os.path.join(args.out, "checkpoints")

    while step < args.steps:
        x, y = batch(torch, args.seed, step, rank)
        opt.zero_grad()
        loss = loss_fn(net(x), y)
        loss.backward()  # DDP averages the gradients across the ranks here
        opt.step()
        step += 1
        if args.step_sleep:
            time.sleep(args.step_sleep)
        if rank == 0 and step % args.log_every == 0:
            print("step %d/%d loss %.5f" % (step, args.steps, loss.item()), flush=True)
            if task is not None:
                task.report_progress(step, args.steps)
        # Every rank asks at the same point of every step; with several ranks
        # the flags are all-reduced, so all of them stop at this same step.
        stop = gtorch.should_checkpoint_all(task) if world > 1 else bool(task and task.should_checkpoint())
        if stop and step < args.steps:
            path = save_checkpoint(torch, dist, ckpt_dir, step, rank, world, model, opt)
            say("rank %d: checkpoint at step %d" % (rank, step))
            if rank == 0:
                p = task.preemption
                task.checkpoint_committed(path, step=step)
                left = p.seconds_left()
                print("preempted (%s); checkpoint %s committed at step %d, %s s before SIGTERM" % (
                    p.reason, path, step, "?" if left is None else "%.1f" % left), flush=True)
            if world > 1:
                leave_group()  # save_checkpoint ended on a barrier
            return 0

    if rank == 0:
        os.makedirs(args.out, exist_ok=True)
        tmp = os.path.join(args.out, "final.pt.tmp")
        torch.save(model.state_dict(), tmp)
        os.replace(tmp, os.path.join(args.out, "final.pt"))
        digest = weights_sha256(model)
        with open(os.path.join(args.out, "final.sha256"), "w") as f:
            f.write(digest + "\n")
        print("done: %d steps; weights sha256 %s" % (step, digest), flush=True)
    if world > 1:
        # All ranks here before any leaves: rank 0's outputs are written.
        dist.barrier()
        leave_group()
    return 0


def say(line):
    """Prints one line in one write: the ranks share the job's output, and
    print's separate write of the newline let two ranks' lines run
    together ("rank 0: …rank 1: …")."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def leave_group():
    """Ends a rank of a group whose work is saved. gloo's teardown
    (destroy_process_group, or the interpreter's exit) can hang a rank
    after all is done (pytorch#75097; seen here in one of a few two-rank
    runs), so the rank flushes and exits at once, skipping it."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main():
    args = parse_args()
    if args.nproc > 1 and "RANK" not in os.environ:
        return launch(args)
    return train(args)


if __name__ == "__main__":
    sys.exit(main())
