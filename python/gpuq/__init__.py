"""A training job's side of gpuq: its task, its preemption, its checkpoints.

Standard library only (Python >= 3.8). Inside a gpuq task (GPUQ_TASK_ID is
set), ``current()`` answers the task; it talks to the node's agent through
the task socket (GPUQ_TASK_SOCKET, HTTP over a Unix socket) and needs no
NATS credential. See docs/training.md for the contract.

    task = gpuq.current()
    ...
    if task and task.should_checkpoint():
        path = save(step)                      # write, fsync, rename
        task.checkpoint_committed(path, step=step)
        sys.exit(0)

``should_checkpoint()`` is a cheap flag, set by a handler of the task's
preemption signal (SIGUSR1 unless the task says otherwise) and by a
background long-poll of the socket, whichever comes first.
"""

import datetime as _dt
import json as _json
import os as _os
import shutil as _shutil
import signal as _signal
import subprocess as _subprocess
import threading as _threading
import time as _time

from ._socket import SocketError, TaskSocket

__all__ = ["current", "Task", "Preemption", "SocketError", "GpuqError"]


class GpuqError(Exception):
    """A request the node refused: ``field`` names the field at fault."""

    def __init__(self, status, message, field=None):
        super().__init__(message)
        self.status = status
        self.field = field


def _parse_time(s):
    if not s:
        return None
    # RFC 3339 with Z and up to nanoseconds; fromisoformat (3.8) wants
    # +00:00 and at most microseconds.
    s = s.replace("Z", "+00:00")
    if "." in s:
        head, rest = s.split(".", 1)
        frac, zone = rest, ""
        for sep in ("+", "-"):
            if sep in rest:
                frac, zone = rest.split(sep, 1)
                zone = sep + zone
                break
        s = head + "." + (frac + "000000")[:6] + zone
    return _dt.datetime.fromisoformat(s)


class Preemption:
    """What the task knows of its preemption.

    requested: whether the preemption was requested; deadline: when SIGTERM
    comes (an aware datetime, or None); reason; grace_s; by_task;
    by_priority; policy.
    """

    def __init__(self, requested=False, reason="", deadline=None, grace_s=0.0, by_task="", by_priority="", policy=""):
        self.requested = requested
        self.reason = reason
        self.deadline = deadline
        self.grace_s = grace_s
        self.by_task = by_task
        self.by_priority = by_priority
        self.policy = policy

    @classmethod
    def from_json(cls, d):
        return cls(
            requested=bool(d.get("requested")),
            reason=d.get("reason") or "",
            deadline=_parse_time(d.get("deadline")),
            grace_s=float(d.get("grace_s") or 0),
            by_task=d.get("by_task") or "",
            by_priority=d.get("by_priority") or "",
            policy=d.get("policy") or "",
        )

    def seconds_left(self):
        """Seconds until SIGTERM (0 when past it; None when not requested)."""
        if self.deadline is None:
            return None
        left = (self.deadline - _dt.datetime.now(_dt.timezone.utc)).total_seconds()
        return max(left, 0.0)

    def __repr__(self):
        return "Preemption(requested=%r, reason=%r, deadline=%r, by_task=%r, by_priority=%r)" % (
            self.requested, self.reason, self.deadline, self.by_task, self.by_priority)


class Task:
    """The gpuq task this process runs in.

    Attributes: id, name, team, attempt, resume_from, resume_step, grace_s,
    gpus, node, checkpoint_dir (from the socket when there is one, else from
    the environment).
    """

    def __init__(self, env=None, socket_path=None, signals=True, poll=True, offline=False):
        env = _os.environ if env is None else env
        self.id = env.get("GPUQ_TASK_ID", "")
        self.name = ""
        self.team = ""
        self.attempt = 1
        self.resume_from = env.get("GPUQ_RESUME_FROM") or None
        self.resume_step = None
        self.grace_s = 0.0
        self.gpus = [g for g in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]
        self.node = env.get("GPUQ_NODE", "")
        self.checkpoint_dir = env.get("GPUQ_CHECKPOINT_DIR") or None
        self.signal = _signal.SIGUSR1
        self.checkpoints = []  # what checkpoint_committed reported, in order
        self._offline = offline
        self._flag = _threading.Event()
        self._lock = _threading.Lock()
        self._preemption = Preemption()
        self._signalled_at = None
        self._closed = _threading.Event()
        self._prev_handler = None
        path = socket_path if socket_path is not None else env.get("GPUQ_TASK_SOCKET", "")
        self._sock = TaskSocket(path) if path else None
        if self._sock is not None:
            try:
                self._load(self._sock.request("GET", "/v1/task"))
            except SocketError:
                pass  # the agent restarting: the environment says enough
        if signals:
            self._install_handler()
        if poll and self._sock is not None:
            t = _threading.Thread(target=self._poll, name="gpuq-preemption", daemon=True)
            t.start()

    def _load(self, d):
        self.id = d.get("id") or self.id
        self.name = d.get("name", "")
        self.team = d.get("team", "")
        self.attempt = int(d.get("attempt") or 1)
        self.resume_from = d.get("resume_from") or self.resume_from
        self.resume_step = d.get("resume_step") or None
        self.grace_s = float(d.get("grace_s") or 0)
        self.gpus = list(d.get("gpus") or self.gpus)
        self.node = d.get("node") or self.node
        self.checkpoint_dir = d.get("checkpoint_dir") or self.checkpoint_dir
        sig = getattr(_signal, d.get("preempt_signal") or "", None)
        if isinstance(sig, _signal.Signals):
            self.signal = sig

    # -- preemption --------------------------------------------------------

    def _install_handler(self):
        if _threading.current_thread() is not _threading.main_thread():
            return  # signal handlers are the main thread's to install
        prev = _signal.getsignal(self.signal)

        def handler(signum, frame):
            self._on_signal()
            if callable(prev) and prev not in (_signal.SIG_DFL, _signal.SIG_IGN):
                prev(signum, frame)

        self._prev_handler = prev
        _signal.signal(self.signal, handler)

    def _on_signal(self):
        with self._lock:
            if self._signalled_at is None:
                self._signalled_at = _time.time()
        self._flag.set()

    def _poll(self):
        backoff = 0.5
        while not self._closed.is_set() and not self._flag.is_set():
            try:
                d = self._sock.request("GET", "/v1/preemption?wait=60s", timeout=75)
                backoff = 0.5
            except (SocketError, OSError, ValueError):
                if self._closed.wait(backoff):
                    return
                backoff = min(backoff * 2, 5.0)
                continue
            p = Preemption.from_json(d)
            if p.requested:
                with self._lock:
                    self._preemption = p
                self._flag.set()
                return

    def should_checkpoint(self):
        """Whether the task was asked to checkpoint and yield (cheap: a flag)."""
        return self._flag.is_set()

    def wait_for_preemption(self, timeout=None):
        """Block until the preemption is requested (or timeout); its answer."""
        return self._flag.wait(timeout)

    @property
    def preemption(self):
        """The latest known Preemption; after the signal alone, its deadline
        is reckoned from the signal's arrival and the grace."""
        with self._lock:
            p = self._preemption
            at = self._signalled_at
        if p.requested:
            return p
        if self._flag.is_set():
            if self._sock is not None:
                try:
                    q = Preemption.from_json(self._sock.request("GET", "/v1/preemption", timeout=5))
                    if q.requested:
                        with self._lock:
                            self._preemption = q
                        return q
                except (SocketError, OSError, ValueError):
                    pass
            deadline = None
            if at is not None and self.grace_s:
                deadline = _dt.datetime.fromtimestamp(at + self.grace_s, _dt.timezone.utc)
            return Preemption(requested=True, reason="signal %s" % self.signal.name, deadline=deadline, grace_s=self.grace_s)
        return p

    # -- reports -----------------------------------------------------------

    def checkpoint_committed(self, path, step=None):
        """Report a committed checkpoint (written, fsynced, renamed): the next
        run of the task resumes from it (GPUQ_RESUME_FROM). Answers the node's
        reply (with "seq", or "spooled": True while NATS is out of reach)."""
        if not isinstance(path, str) or not path.strip():
            raise ValueError("path: say where the committed checkpoint is")
        if step is not None and (not isinstance(step, int) or step < 0):
            raise ValueError("step: must be an integer >= 0 (got %r)" % (step,))
        body = {"ref": path}
        if step is not None:
            body["step"] = step
        self.checkpoints.append(dict(body))
        if self._offline:
            return {"ref": path, "step": step, "offline": True}
        if self._sock is not None:
            try:
                return self._sock.request("POST", "/v1/checkpoint", body)
            except SocketError as e:
                if e.status is not None and e.status < 500:
                    raise GpuqError(e.status, str(e), e.field)
                # unreachable (agent restarting): over NATS instead
        return self._checkpoint_cli(path, step)

    def _checkpoint_cli(self, path, step):
        gpuq = _os.environ.get("GPUQ_BIN") or _shutil.which("gpuq") or "gpuq"
        cmd = [gpuq, "checkpoint", "--ref", path, "--json"]
        if step is not None:
            cmd += ["--step", str(step)]
        out = _subprocess.run(cmd, stdout=_subprocess.PIPE, stderr=_subprocess.PIPE, timeout=60)
        if out.returncode != 0:
            raise GpuqError(None, "gpuq checkpoint: %s" % out.stderr.decode(errors="replace").strip())
        try:
            return _json.loads(out.stdout or b"{}")
        except ValueError:
            return {}

    def report_progress(self, step=None, total=None, fraction=None):
        """Report progress: step of total, or a fraction in [0, 1]."""
        if fraction is not None:
            if step is not None or total is not None:
                raise ValueError("give either step and total, or fraction")
            body = {"fraction": float(fraction)}
        else:
            if step is None or total is None:
                raise ValueError("step and total are required (or give fraction)")
            body = {"step": int(step), "total": int(total)}
        if self._sock is None or self._offline:
            return body
        try:
            return self._sock.request("POST", "/v1/progress", body)
        except SocketError as e:
            if e.status is not None and e.status < 500:
                raise GpuqError(e.status, str(e), e.field)
            return None  # progress is best effort

    def close(self):
        """Stop the background long-poll and restore the signal handler."""
        self._closed.set()
        if self._prev_handler is not None and _threading.current_thread() is _threading.main_thread():
            try:
                _signal.signal(self.signal, self._prev_handler)
            except (ValueError, TypeError):
                pass
            self._prev_handler = None

    def __repr__(self):
        return "Task(id=%r, attempt=%r, resume_from=%r)" % (self.id, self.attempt, self.resume_from)


_current = None
_current_lock = _threading.Lock()


def current():
    """The task this process runs in (one Task per process), None outside gpuq."""
    global _current
    with _current_lock:
        if _current is None:
            if not _os.environ.get("GPUQ_TASK_ID"):
                return None
            _current = Task()
        return _current


def _set_current(task):
    """Replace the current task (gpuq.testing)."""
    global _current
    with _current_lock:
        old, _current = _current, task
    return old
