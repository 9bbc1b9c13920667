"""The train-step benchmark's FLOP accounting: model FLOPs for MFU, plus what rematerialised
layers and the chunked log-prob compute again for the hardware FLOPs, by hand on `tiny`."""

from ragjax.bench.train_step import model_flops_per_token, recompute_flops_per_token
from ragjax.models.presets import get_preset


def test_recompute_flops_by_hand():
  cfg = get_preset("tiny")           # E 64, M 128, H 4 over KVH 2, D 16, L 2, V 512
  attention = 4 * 2 * 4 * 16 * 32    # score and mix products, 4 H D T per layer at T = 32
  # every product but down_proj: q/k/v 64 x 8 x 16, o 4 x 16 x 64, gate and up 64 x 128
  layers = 2 * 2 * (64 * 8 * 16 + 4 * 16 * 64 + 2 * 64 * 128)
  assert recompute_flops_per_token(cfg, 32, 8192) == 0
  assert recompute_flops_per_token(cfg.replace(remat=True), 32, 8192) == attention + layers
  dots = cfg.replace(remat=True, remat_policy="dots")
  assert recompute_flops_per_token(dots, 32, 8192) == attention
  # a vocabulary of more than one chunk: the unembedding's logits again in the backward
  assert recompute_flops_per_token(dots, 32, 128) == attention + 2 * 512 * 64
  assert model_flops_per_token(cfg, 32) > recompute_flops_per_token(cfg.replace(remat=True),
                                                                    32, 128)

