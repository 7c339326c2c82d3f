"""Exercise a job's preemption handling with no cluster."""

import os
import signal
import threading

from . import Task, _set_current


def preempt_after(seconds, grace_s=30.0, send_signal=True):
    """Make gpuq.current() a stand-in task, preempted after seconds.

    The stand-in reads its environment like a real task (GPUQ_RESUME_FROM,
    GPUQ_CHECKPOINT_DIR), has no socket, and records what the job reports
    (task.checkpoints) instead of sending it. After seconds it sends the
    process the preemption signal (SIGUSR1), as the node would, so the
    job's own handlers run too (send_signal=False: only the flag is set).
    Answers the stand-in; task.close() (or the process's end) undoes it.
    """
    env = dict(os.environ)
    env.setdefault("GPUQ_TASK_ID", "gpuq-testing")
    env.pop("GPUQ_TASK_SOCKET", None)
    task = Task(env=env, signals=True, poll=False, offline=True)
    task.grace_s = float(grace_s)

    def fire():
        if task._closed.is_set():
            return
        if send_signal:
            os.kill(os.getpid(), task.signal)
        else:
            task._on_signal()

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    prev = _set_current(task)
    close = task.close

    def undo():
        timer.cancel()
        close()
        _set_current(prev)

    task.close = undo
    return task
