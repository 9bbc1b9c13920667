"""`python -m ragjax.bench.decode_attention` at a tiny shape: the three attention layouts give
the same output, and the command prints one line per window with every timing."""

import json

import numpy as np

from ragjax.bench import decode_attention


def test_layouts_agree():
  variants = decode_attention.attention_variants(2, 3, 96, 2, 2, 16, 48)
  outs = {name: np.asarray(fn(*args)) for name, (fn, args) in variants.items()}
  assert outs["stacked_window"].shape == (3, 2, 2, 16)
  assert np.abs(outs["stacked_window"]).max() > 0.01
  for name in ("heads_major_window", "per_layer_full"):
    np.testing.assert_allclose(outs[name], outs["stacked_window"], rtol=1e-5, atol=1e-6)


def test_command_reports_each_window(capsys):
  assert decode_attention.main(["--batch", "2", "--cache", "256", "--windows", "128,256",
                                "--position", "100", "--repeats", "2"]) == 0
  lines = [json.loads(l) for l in capsys.readouterr().out.splitlines() if l.startswith("{")]
  assert [l["window"] for l in lines] == [128, 256]
  for l in lines:
    assert set(l["step_ms"]) == {"stacked", "per_layer", "per_layer_grown"}
    assert all(v > 0 for v in l["step_ms"].values()) and set(l["attention_ms"]) == {
        "stacked_window", "heads_major_window", "per_layer_full"}
    assert all(v > 0 for v in l["attention_ms"].values())
