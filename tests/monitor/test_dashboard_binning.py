"""Server-side binning of steps into heatmap columns: every step lands in the column that claims it, and a cell
keeps its bin's most extreme value (non-finite first)."""
import numpy as np

from tbprobe.monitor.dashboard import _binned, _thin


def test_columns_cover_the_steps_they_claim():
    for span, n in [(10, 3), (7, 7), (100, 9), (5, 20), (100_000, 400)]:
        steps = np.arange(span, dtype=np.int64) + 3
        cols, grid = _binned([(steps, steps.astype(float))], n)
        assert len(cols) == min(n, span)
        assert cols[0][0] == 3 and cols[-1][1] == span + 2
        assert all(a[1] + 1 == b[0] for a, b in zip(cols, cols[1:]))  # contiguous, no gaps or overlaps
        # increasing values: the kept value is the bin's last step
        assert grid[0] == [float(c[1]) for c in cols]


def test_extremes_and_non_finite_win_their_bin():
    steps = np.arange(8, dtype=np.int64)
    values = np.array([1.0, -5.0, 2.0, 3.0, np.nan, 100.0, 0.5, np.inf])
    cols, grid = _binned([(steps, values)], 4)
    assert cols == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert grid == [[-5.0, 3.0, "nan", "inf"]]
    cols, grid = _binned([(steps, values), (steps[:0], values[:0])], 4, max_step=11)
    assert cols[-1][1] == 11 and grid[1] == [None] * 4


def test_thin_keeps_the_last_point():
    steps = np.arange(1000)
    s, v = _thin(steps, steps * 2.0, 10)
    assert len(s) == 10 and s[-1] == 999 and s[0] == 0
