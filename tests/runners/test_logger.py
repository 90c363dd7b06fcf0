"""curve.png: the legend never hides an evaluation point."""

from __future__ import annotations

import json

import numpy as np
import pytest

from orin_rl.runners.logger import curve_figure, plot_curve


def _records(shape: str) -> list[dict]:
    """60 iterations whose returns rise, fall (late points low, right) or stay flat."""
    out = []
    for i in range(1, 61):
        value = {"rise": 10 + 8 * i, "fall": 500 - 8 * i, "flat": 200.0}[shape]
        record = {"global_step": 256 * i, "time_s": 0.3 * i, "charts/episode_return_mean": value}
        if i % 6 == 0:
            record.update({"eval/return_mean": value, "eval/return_std": 4.0})
        out.append(record)
    return out


@pytest.mark.parametrize("shape", ["rise", "fall", "flat"])
def test_legend_hides_no_evaluation_point(shape):
    records = _records(shape)
    fig = curve_figure(records, "CartPole-v1")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legends = fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    assert legends, "the figure has a legend"
    evals = [r for r in records if "eval/return_mean" in r]
    for ax, xkey in zip(fig.axes, ("global_step", "time_s"), strict=True):
        points = ax.transData.transform([(r[xkey], r["eval/return_mean"]) for r in evals])
        for legend in legends:
            box = legend.get_window_extent(renderer).padded(6)  # a marker's radius
            inside = [box.contains(x, y) for x, y in points]
            assert not any(inside), f"legend covers evaluation point(s) {np.flatnonzero(inside)}"


def test_plot_curve_writes_a_png(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps(r) + "\n" for r in _records("rise")))
    plot_curve(metrics, tmp_path / "curve.png", "t")
    assert (tmp_path / "curve.png").read_bytes()[:4] == b"\x89PNG"
