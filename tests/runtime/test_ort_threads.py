"""The ONNX Runtime backend's bound buffers under calls from two threads."""

from __future__ import annotations

import sys
import threading

import numpy as np

from orin_rl import runtime


def test_two_threads_each_get_their_own_action(run_with_bundle, rng):
    """IO binding reuses one input and one output buffer per batch size: two threads calling
    infer at once must still each get the action of their own observation."""
    backend = runtime.load(run_with_bundle / "bundle", "onnxruntime")
    backend.activate()
    try:
        obs = rng.normal(size=(512, 4)).astype(np.float32) * 2
        actions = np.array([int(np.asarray(backend.infer(o[None])).ravel()[0]) for o in obs])
        if len(set(actions)) < 2:
            obs = np.concatenate([obs, -obs])
            actions = np.array([int(np.asarray(backend.infer(o[None])).ravel()[0]) for o in obs])
        assert len(set(actions)) >= 2, "the policy gives one action everywhere: no test"
        first, second = obs[actions == actions[0]][:1], obs[actions != actions[0]][:1]
        want = {0: int(actions[0]), 1: int(actions[actions != actions[0]][0])}
        wrong: list[int] = []

        def worker(k: int, x: np.ndarray) -> None:
            for _ in range(3000):
                if int(np.asarray(backend.infer(x)).ravel()[0]) != want[k]:
                    wrong.append(k)

        switch = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)
        try:
            threads = [threading.Thread(target=worker, args=(k, x))
                       for k, x in ((0, first), (1, second))]  # fmt: skip
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            sys.setswitchinterval(switch)
        assert not wrong, f"{len(wrong)} calls got the other thread's action"
    finally:
        backend.deactivate()
