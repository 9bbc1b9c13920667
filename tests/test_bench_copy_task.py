"""The copy-task benchmark's data: the masked tokens are exactly a repeat of an earlier span."""

import numpy as np

from ragjax.bench.copy_task import main, make_batch, make_tiled_batch


def test_masked_tokens_repeat_an_earlier_span():
  rng = np.random.default_rng(0)
  for fixed in (False, True):
    x, m = make_batch(rng, 64, 32, 50, fixed)
    assert x.shape == m.shape == (64, 32) and x.min() >= 3 and x.max() < 53
    for row, mask in zip(x, m):
      idx = np.flatnonzero(mask)
      span = len(idx) + 1                        # the repeat's first token is unmasked
      first = idx[0] - 1
      assert 3 <= span <= 12 and np.all(np.diff(idx) == 1)
      offsets = [o for o in range(span, first + 1)
                 if np.array_equal(row[first - o:first - o + span], row[first:first + span])]
      assert offsets, row                          # an earlier copy exists
      if fixed:
        assert first == 8 and span == 8


def test_tiled_rows_repeat_their_period_and_the_mask_starts_after_it():
  x, m = make_tiled_batch(np.random.default_rng(0), 32, 64, 50)
  assert x.shape == m.shape == (32, 64) and x.min() >= 3 and x.max() < 53
  for row, mask in zip(x, m):
    period = int(np.flatnonzero(mask)[0]) - 1
    assert 6 <= period <= 20 and mask[period + 1:].all() and not mask[:period + 1].any()
    assert np.array_equal(row[period:], row[:len(row) - period])      # periodic


def test_runs_and_reports_the_ratio(capsys):
  main(["--steps", "3", "--batch", "4"])
  out = capsys.readouterr().out
  assert "reference ln(vocab) = 6.551" in out and "step     3" in out and "ratio" in out
  main(["--steps", "2", "--batch", "4", "--tiled", "--length", "48"])
  assert "tiled periods" in capsys.readouterr().out
