"""examples/train.py on the client, with no cluster and no torch (python3 -m unittest)."""

import contextlib
import io
import json
import os
import runpy
import sys
import tempfile
import unittest
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import gpuq  # noqa: E402
import gpuq.testing  # noqa: E402

TRAIN = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "train.py")


def run_train(args, env):
    """Run examples/train.py in this process (gpuq.current() is the stand-in); its exit code and output."""
    out = io.StringIO()
    with mock.patch.dict(os.environ, env), mock.patch.object(sys, "argv", [TRAIN] + args), \
            contextlib.redirect_stdout(out):
        try:
            runpy.run_path(TRAIN, run_name="__main__")
            code = 0
        except SystemExit as e:
            code = e.code
    return code, out.getvalue()


class TrainExampleTest(unittest.TestCase):
    def test_preempted_checkpoints_then_resumes_to_the_end(self):
        d = tempfile.mkdtemp(prefix="gq-train")
        env = {"GPUQ_CHECKPOINT_DIR": d}
        # preempted mid-run: one checkpoint, at the step it stopped, and exit 0
        with mock.patch.dict(os.environ, env):
            task = gpuq.testing.preempt_after(0.2)
        try:
            code, out = run_train(["--steps", "200", "--step-seconds", "0.01"], env)
        finally:
            task.close()
        self.assertEqual(code, 0, out)
        self.assertEqual(len(task.checkpoints), 1, out)
        ck = task.checkpoints[0]
        self.assertTrue(0 < ck["step"] < 200, ck)
        with open(ck["ref"]) as f:
            self.assertEqual(json.load(f)["step"], ck["step"])
        self.assertIn("preempted at step %d" % ck["step"], out)
        self.assertNotIn("done:", out)

        # the next run resumes from it and finishes, reporting nothing more
        env["GPUQ_RESUME_FROM"] = ck["ref"]
        with mock.patch.dict(os.environ, env):
            task = gpuq.testing.preempt_after(3600)
        try:
            code, out = run_train(["--steps", "%d" % (ck["step"] + 5), "--step-seconds", "0"], env)
        finally:
            task.close()
        self.assertEqual(code, 0, out)
        self.assertIn("resuming from %s at step %d" % (ck["ref"], ck["step"]), out)
        self.assertIn("done: %d steps" % (ck["step"] + 5), out)
        self.assertEqual(task.checkpoints, [])

    def test_outside_gpuq_it_just_trains(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUQ_")}
        with mock.patch.dict(os.environ, env, clear=True):
            self.assertIsNone(gpuq.current())
            code, out = run_train(["--steps", "3", "--step-seconds", "0"], {})
        self.assertEqual(code, 0)
        self.assertIn("done: 3 steps", out)


if __name__ == "__main__":
    unittest.main()
