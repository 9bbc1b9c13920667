"""The cold-start SFT step benchmark: built from the world config (its own traces through the
real engine and retriever), it times each width bucket and sets the model FLOPs against the
matmul peak and the policy's own widest matmul, timed in the same run."""

import pytest

from ragjax.bench.sft_step import main, sft_flops
from ragjax.models.model_config import DecoderConfig


def test_sft_flops_by_hand():
  cfg = DecoderConfig(vocab_size=10, hidden_size=4, intermediate_size=8, num_layers=1,
                      num_heads=2, num_kv_heads=1, head_dim=2, qkv_bias=False,
                      tie_word_embeddings=True)
  # q 4x2x2 + o 2x2x4 = 32, k and v 4x1x2 = 16, mlp 3x4x8 = 96, unembedding 40, and the
  # convention's 6N counts the 3 norms' 12 weights too (every parameter but the input lookup)
  matmul = 32 + 16 + 96 + 40 + 12
  attention = 12 * 1 * 2 * 2 * 6          # 12 L H D T at width 6
  per_token = 6 * matmul + attention
  assert sft_flops(cfg, 6, 3, 5, context=True) == pytest.approx(per_token * 3 * 6)
  # gathered: the unembedding (6 x 40 per position) runs only at the 5 trained positions
  assert sft_flops(cfg, 6, 3, 5, context=False) == pytest.approx(
      per_token * 18 - 6 * 40 * (18 - 5))


def test_toy_world_sft_step_reports_each_width(tmp_path, capsys):
  r = main(["--config", "configs/world.py:toy", "--steps", "1", "--traces", "16",
            "--workdir", str(tmp_path)])
  assert capsys.readouterr().out.count('"bench": "sft_step"') == 1
  assert r["traces"] == 16 and r["batch"] == 8 and r["context_weight"] == 0.5
  widths = r["widths"]
  assert widths and {w["width"] for w in widths} <= {160, 256, 352, 512}
  assert sum(w["share"] for w in widths) == pytest.approx(1.0, abs=1e-3)
  assert r["step_s"] == pytest.approx(sum(w["share"] * w["step_s"] for w in widths), rel=1e-2)
  for w in widths:
    assert w["step_s"] > 0 and w["compile_s"] > 0
    assert 0 < w["fraction_of_peak"] < 2                   # a fraction (timing noise aside)
  assert r["measured_matmul_peak_tflops"] > 0 and 0 < r["fraction_of_peak"] < 2
  assert r["shape_matmul"][1:] == [r["hidden"], r["intermediate"]]
  assert 0 < r["shape_matmul_fraction_of_peak"] < 2
