"""mjlab's policy export read by the runtime: a robot's deploy image has neither torch nor the
exporter, and runs the bare file."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("onnxruntime", reason="needs onnxruntime")


def test_a_bare_mjlab_export_runs_without_torch_or_the_exporter(mjlab_style_onnx, tmp_path):
    """``runtime.locate`` imports the file into the cache and ONNX Runtime runs it, with torch
    unimportable and nothing of ``orin_rl.export`` imported (mutation: the runtime importing
    ``orin_rl.export.mjlab_onnx`` again)."""
    code = textwrap.dedent(
        f"""
        import sys
        sys.modules["torch"] = None  # as on a deploy image: the import fails
        import numpy as np
        from orin_rl import runtime

        found = runtime.locate(r"{mjlab_style_onnx}")
        with runtime.load(r"{mjlab_style_onnx}", "onnxruntime") as backend:
            action = backend.infer(np.ones((1, 3), np.float32))
        print(found["bundle"].parent.name, [round(float(a), 4) for a in action.ravel()])
        print(sorted(m for m, mod in sys.modules.items() if mod is not None
                     and (m.split(".")[0] == "torch" or m.startswith("orin_rl.export"))))
        """
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    # ones(3) @ [[0, .1], [.2, .3], [.4, .5]]: the file's own MatMul
    assert proc.stdout.splitlines() == ["mjlab_imports [0.6, 0.9]", "[]"]
