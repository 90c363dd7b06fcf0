"""The latency histogram: its percentile labels stay readable however close the lines are."""

from __future__ import annotations

import itertools

import matplotlib.text
import numpy as np
import pytest

from orin_rl.runtime.stats import (
    PERCENTILES,
    histogram_figure,
    histogram_png,
    percentile,
    summarize_us,
)


def _labels(fig) -> list[matplotlib.text.Text]:
    names = ("p50", "p99", "p99.9", "deadline")
    return [t for t in fig.findobj(matplotlib.text.Text) if t.get_text().strip().startswith(names)]


@pytest.mark.parametrize("spread_us", [0.5, 3.0, 200.0])  # p50 and p99 nearly on one line
def test_percentile_labels_do_not_overlap(spread_us):
    rng = np.random.default_rng(0)
    latency_ns = ((20.0 + spread_us * rng.random(10_000)) * 1e3).astype(np.int64)
    fig = histogram_figure(latency_ns, "backend at 1000 Hz", deadline_us=1000.0)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    labels = _labels(fig)
    assert [t.get_text().split()[0] for t in labels] == ["p50", "p99", "p99.9", "deadline"]
    for name, q in (("p50", 50), ("p99", 99)):
        value = np.percentile(latency_ns / 1e3, q)
        assert any(t.get_text() == f"{name} {value:,.1f} µs" for t in labels)
    boxes = [t.get_window_extent(renderer) for t in labels]
    for (a, ta), (b, tb) in itertools.combinations(zip(boxes, labels, strict=True), 2):
        assert not a.overlaps(b), f"{ta.get_text()!r} overlaps {tb.get_text()!r}"
    axes_box = fig.axes[0].get_window_extent(renderer)
    assert not any(box.overlaps(axes_box) for box in boxes)  # beside the bars, not on them


def test_histogram_png_is_written(tmp_path):
    path = tmp_path / "h.png"
    histogram_png(np.full(100, 20_000, dtype=np.int64), path, "t", None)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_reports_percentiles_are_numpys_bit_for_bit():
    """summarize_us sorts once and interpolates itself (np.percentile's np.unique imported
    numpy.ma into a robot's run: 1.2 MiB); its figures are np.percentile's, bit for bit."""
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 10, 1001):
        ascending = np.sort(rng.exponential(30.0, n))
        for q in (0, 33.3, 50, 90, 99, 99.9, 100):
            assert percentile(ascending, q) == float(np.percentile(ascending, q)), (n, q)
    samples = rng.integers(1_000, 90_000, 2_000)
    us = samples / 1e3
    expected = {k: float(np.percentile(us, q)) for k, q in PERCENTILES.items()}
    assert summarize_us(samples) == {"mean": us.mean(), **expected, "max": us.max()}
