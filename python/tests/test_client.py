"""Tests of the gpuq client against a stand-in task socket (python3 -m unittest)."""

import datetime
import http.server
import json
import os
import signal
import socketserver
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import gpuq  # noqa: E402
import gpuq.testing  # noqa: E402
import gpuq.torch  # noqa: E402


class FakeNode:
    """A task socket that answers like the agent's (services/gpuagent/tasksock)."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="gq")
        self.path = os.path.join(self.dir, "task.sock")
        self.preempted = threading.Event()
        self.deadline = "2026-12-03T16:00:30.123456789Z"
        self.posts = []
        self.refuse = None
        node = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def address_string(self):
                return "task"

            def answer(self, status, body):
                b = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(b)))
                self.end_headers()
                self.wfile.write(b)

            def preemption(self):
                if not node.preempted.is_set():
                    return {"requested": False, "reason": "", "deadline": None, "grace_s": 30}
                return {"requested": True, "reason": "crit waits", "deadline": node.deadline, "grace_s": 30,
                        "by_task": "c1", "by_priority": "critical", "policy": "priority"}

            def do_GET(self):
                if self.path == "/v1/task":
                    return self.answer(200, {"id": "t1", "name": "train", "attempt": 2, "resume_from": "/ck/step-120",
                                             "resume_step": 120, "grace_s": 30, "preempt_signal": "SIGUSR1",
                                             "gpus": ["GPU-0"], "checkpoint_dir": "/ck"})
                if self.path.startswith("/v1/preemption"):
                    if "wait=" in self.path:
                        node.preempted.wait(5)
                    return self.answer(200, self.preemption())
                self.answer(404, {"error": "path: no", "field": "path"})

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                node.posts.append((self.path, body))
                if node.refuse:
                    return self.answer(node.refuse[0], {"error": node.refuse[1], "field": node.refuse[2]})
                if self.path == "/v1/checkpoint":
                    return self.answer(201, dict(body, task_id="t1", seq=42))
                self.answer(200, body)

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

        self.server = Server(self.path, Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.preempted.set()
        self.server.shutdown()
        self.server.server_close()
        os.unlink(self.path)
        os.rmdir(self.dir)


class TaskTest(unittest.TestCase):
    def setUp(self):
        self.node = FakeNode()
        self.env = {"GPUQ_TASK_ID": "t1", "GPUQ_TASK_SOCKET": self.node.path}

    def tearDown(self):
        self.node.close()

    def task(self, **kw):
        t = gpuq.Task(env=self.env, **kw)
        self.addCleanup(t.close)
        return t

    def test_reads_its_task(self):
        t = self.task(signals=False, poll=False)
        self.assertEqual((t.id, t.attempt, t.resume_from, t.resume_step, t.grace_s, t.gpus),
                         ("t1", 2, "/ck/step-120", 120, 30.0, ["GPU-0"]))

    def test_long_poll_sets_the_flag_with_deadline_and_reason(self):
        t = self.task(signals=False)
        self.assertFalse(t.should_checkpoint())
        self.assertFalse(t.preemption.requested)
        self.node.preempted.set()
        self.assertTrue(t.wait_for_preemption(5), "the long-poll did not set the flag")
        p = t.preemption
        self.assertEqual((p.requested, p.reason, p.by_task, p.by_priority, p.policy),
                         (True, "crit waits", "c1", "critical", "priority"))
        self.assertEqual(p.deadline, datetime.datetime(2026, 12, 3, 16, 0, 30, 123456, tzinfo=datetime.timezone.utc))
        self.assertEqual(p.seconds_left(), 0.0)  # that deadline is past

    def test_the_signal_sets_the_flag(self):
        t = self.task(poll=False)
        os.kill(os.getpid(), signal.SIGUSR1)
        self.assertTrue(t.wait_for_preemption(5))
        self.assertTrue(t.should_checkpoint())

    def test_checkpoint_committed(self):
        t = self.task(signals=False, poll=False)
        cases = {
            "with a step": (("/ck/step-140",), {"step": 140}, {"ref": "/ck/step-140", "step": 140}),
            "without": (("s3://b/k",), {}, {"ref": "s3://b/k"}),
        }
        for name, (args, kw, want) in cases.items():
            with self.subTest(name):
                out = t.checkpoint_committed(*args, **kw)
                self.assertEqual(self.node.posts[-1], ("/v1/checkpoint", want))
                self.assertEqual(out["seq"], 42)

    def test_bad_input_is_refused_before_sending(self):
        t = self.task(signals=False, poll=False)
        cases = {
            "empty path": lambda: t.checkpoint_committed(""),
            "negative step": lambda: t.checkpoint_committed("/c", step=-1),
            "step not an int": lambda: t.checkpoint_committed("/c", step=1.5),
            "progress both ways": lambda: t.report_progress(1, 2, fraction=0.5),
            "progress without total": lambda: t.report_progress(1),
        }
        for name, call in cases.items():
            with self.subTest(name):
                self.assertRaises(ValueError, call)
        self.assertEqual(self.node.posts, [])

    def test_a_refusal_names_the_field(self):
        t = self.task(signals=False, poll=False)
        self.node.refuse = (409, "task_id: the run is over", "task_id")
        with self.assertRaises(gpuq.GpuqError) as cm:
            t.checkpoint_committed("/c", step=1)
        self.assertEqual((cm.exception.status, cm.exception.field), (409, "task_id"))

    def test_report_progress(self):
        t = self.task(signals=False, poll=False)
        t.report_progress(30, 120)
        t.report_progress(fraction=0.5)
        self.assertEqual(self.node.posts, [("/v1/progress", {"step": 30, "total": 120}), ("/v1/progress", {"fraction": 0.5})])

    def test_socket_gone_environment_still_answers(self):
        env = {"GPUQ_TASK_ID": "t9", "GPUQ_TASK_SOCKET": "/nonexistent/task.sock", "GPUQ_RESUME_FROM": "/ck/7"}
        t = gpuq.Task(env=env, signals=False, poll=False)
        self.addCleanup(t.close)
        self.assertEqual((t.id, t.resume_from), ("t9", "/ck/7"))


class CurrentTest(unittest.TestCase):
    def test_none_outside_gpuq(self):
        old = os.environ.pop("GPUQ_TASK_ID", None)
        try:
            self.assertIsNone(gpuq.current())
        finally:
            if old is not None:
                os.environ["GPUQ_TASK_ID"] = old


class TestingTest(unittest.TestCase):
    def test_preempt_after(self):
        task = gpuq.testing.preempt_after(0.2, grace_s=30)
        self.addCleanup(task.close)
        self.assertIs(gpuq.current(), task)
        self.assertFalse(task.should_checkpoint())
        begin = time.time()
        while not task.should_checkpoint() and time.time() - begin < 5:
            time.sleep(0.01)  # a training loop: the signal arrives between steps
        self.assertTrue(task.should_checkpoint(), "not preempted within 5 s")
        p = task.preemption
        self.assertTrue(p.requested)
        self.assertTrue(25 < p.seconds_left() <= 30, p.seconds_left())
        task.checkpoint_committed("/tmp/ck", step=3)
        self.assertEqual(task.checkpoints, [{"ref": "/tmp/ck", "step": 3}])

    def test_should_checkpoint_all_without_a_process_group(self):
        try:
            import torch  # noqa: F401
        except ImportError:
            self.skipTest("torch is not installed")
        task = gpuq.testing.preempt_after(0, send_signal=False)
        self.addCleanup(task.close)
        task.wait_for_preemption(5)
        self.assertTrue(gpuq.torch.should_checkpoint_all(task))
        self.assertFalse(gpuq.torch.should_checkpoint_all(None))


if __name__ == "__main__":
    unittest.main()
