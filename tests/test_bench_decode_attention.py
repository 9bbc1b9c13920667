"""`python -m ragjax.bench.decode_attention` at a tiny shape: the three attention layouts give
the same output, and the command prints one line per window with every timing."""

import json

import numpy as np

from ragjax.bench import decode_attention
from ragjax.models import cpu_attention


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
    kernel = {"kernel"} if cpu_attention.available() else set()
    assert set(l["step_ms"]) == {"stacked", "per_layer", "per_layer_grown"} | kernel
    assert ("floor_over_kernel_step" in l) == bool(kernel)
    assert all(v > 0 for v in l["step_ms"].values()) and set(l["attention_ms"]) == {
        "stacked_window", "heads_major_window", "per_layer_full"}
    assert all(v > 0 for v in l["attention_ms"].values())
    assert l["read_gb_per_s"] > 0 and l["read_floor_ms"] > 0 and l["floor_over_step"] > 0
    assert l["step_bytes"] == decode_attention.decode_step_bytes(
        decode_attention_config(), 2, l["window"])


def decode_attention_config():
  from ragjax.bench.rollout import model_config
  return model_config("small", 8192, "float32")


def test_step_bytes_by_hand():
  """`small`: 4 layers of (q 256x256, k and v 256x128, o 256x256, their 512 biases, MLP
  3 x 256x704, two norms of 256), a final norm and the 8192 x 256 table, tied: every parameter
  is read (the table as the unembedding).  Untied, the table's lookup reads only the 2 rows'
  embeddings and the separate unembedding counts instead.  Plus the window's keys and values."""
  cfg = decode_attention_config()
  layer = 65536 + 2 * 32768 + 65536 + 512 + 3 * 256 * 704 + 2 * 256
  assert cfg.tie_word_embeddings and cfg.num_params() == 4 * layer + 256 + 8192 * 256
  kv = 4 * 2 * 2 * 2 * 128 * 64            # layers x (k, v) x rows x kv heads x slots x dim
  assert decode_attention.decode_step_bytes(cfg, 2, 128) == (cfg.num_params() + kv) * 4
  untied = cfg.replace(tie_word_embeddings=False)
  weights = 4 * layer + 256 + 8192 * 256 + 2 * 256
  assert decode_attention.decode_step_bytes(untied, 2, 128) == (weights + kv) * 4
