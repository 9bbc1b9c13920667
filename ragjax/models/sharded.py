"""The decoder on a mesh: param shardings from logical axes and a jitted, sharded forward."""

from __future__ import annotations

from typing import Any, Callable

import jax
from jax.sharding import Mesh

from ragjax.models.model_config import DecoderConfig
from ragjax.models.decoder import Decoder, abstract_params, param_logical_axes
from ragjax.parallel.shard import batch_sharding, param_shardings


def decoder_shardings(cfg: DecoderConfig, mesh: Mesh, head: str = "lm",
                      fused: bool = False) -> Any:
  """Shardings for a decoder's params (what `hf_io.load_decoder(shardings=...)` takes);
  `fused`: for the fused-projection layout a sampler may run on (ragjax.models.fused)."""
  return param_shardings(param_logical_axes(cfg, head, fused),
                         abstract_params(cfg, head, fused), mesh)


def sharded_forward(cfg: DecoderConfig, mesh: Mesh, batch_size: int, head: str = "lm"
                    ) -> Callable:
  """`fn(params, tokens, attention_mask) -> logits` jitted with explicit in/out shardings.

  Params follow the logical-axis rules; tokens and outputs split their batch over
  (data, fsdp).  The caller places params with `decoder_shardings` (or loads them that way).
  """
  model = Decoder(cfg, head=head)
  p_sh = decoder_shardings(cfg, mesh, head)
  tok_sh = batch_sharding(mesh, 2, batch_size)
  out_sh = batch_sharding(mesh, 3 if head == "lm" else 2, batch_size)

  def forward(params, tokens, attention_mask):
    out, _ = model.apply({"params": params}, tokens, attention_mask=attention_mask)
    return out

  return jax.jit(forward, in_shardings=(p_sh, tok_sh, tok_sh), out_shardings=out_sh)
