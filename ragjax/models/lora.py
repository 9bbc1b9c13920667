"""LoRA adapters for the decoder: low-rank updates W + (alpha / r) A B on chosen projections.

    lora = LoraConfig(rank=64, alpha=64.0)                 # ReZero's adapter (seeds §B4)
    adapters = init_adapters(params, lora, jax.random.PRNGKey(3407))
    merged = merge(params, adapters, lora)                 # a plain param tree: any forward
    save_decoder(out_dir, cfg, merged)                     # the merged HF export

Adapters are a separate pytree that mirrors the params down to each targeted module
(`{"layers_0": {"self_attn": {"q_proj": {"lora_a": [in, r], "lora_b": [r, out]}}}}`; with
`scan_layers` every leaf has the leading layer axis of its kernel).  `in` / `out` are the
kernel's input and output axes flattened (o_proj's input is (heads, head_dim)).  Initialisation
is PEFT's: A ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming-uniform with a = sqrt(5)), B = 0, so a fresh
adapter leaves the model unchanged and the reference policy "adapters disabled" is the base.

Why merge instead of an adapter-aware forward.  The decoder stays a pure function of one param
tree, so training, scoring, the KV-cache sampler, sharding rules and HF export need no second
code path; `merge` is the only LoRA-specific computation.  Decoding with merged weights costs
exactly the base model per token (an adapter-aware decode adds two skinny matmuls and their
launches per target per layer per token, on a loop that is memory-bound).  The price is one
merge per weight sync (once per RL step) and one merged copy of the targeted kernels while the
sampler holds it; `python -m ragjax.bench.lora` measures the merge against a decode turn
(BENCHMARKS.md "LoRA").  In the train step the merge sits inside the differentiated function,
so the gradient w.r.t. each merged kernel exists transiently (param-sized, like full
fine-tuning's gradient); what LoRA saves is the optimizer state (Adam moments only for the
adapters) and the checkpoints, which hold only the adapters.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

import jax
import jax.numpy as jnp
from flax import traverse_util

# Projection name -> how many leading (after any layer axis) kernel axes are inputs.
TARGET_IN_AXES = {"q_proj": 1, "k_proj": 1, "v_proj": 1, "o_proj": 2, "gate_proj": 1,
                  "up_proj": 1, "down_proj": 1}
ALL_TARGETS = tuple(TARGET_IN_AXES)
# Unflattened kernel rank of each target (inputs + outputs), to find a leading layer axis.
_KERNEL_NDIM = {"q_proj": 3, "k_proj": 3, "v_proj": 3, "o_proj": 3, "gate_proj": 2,
                "up_proj": 2, "down_proj": 2}


@dataclasses.dataclass(frozen=True)
class LoraConfig:
  """`model.lora` in a config: rank 0 = no adapters (full fine-tuning)."""
  rank: int = 0
  alpha: float = 16.0
  targets: tuple = ALL_TARGETS
  seed: int = 0                      # adapter init (ReZero/Unsloth: random_state 3407)

  def __post_init__(self):
    if self.rank < 0:
      raise ValueError(f"model.lora.rank must be >= 0, got {self.rank}")
    unknown = sorted(set(self.targets) - set(TARGET_IN_AXES))
    if unknown:
      raise ValueError(f"model.lora.targets: unknown projection(s) {unknown}; known: "
                       f"{list(ALL_TARGETS)}")
    if self.rank and not self.targets:
      raise ValueError("model.lora.targets is empty; name at least one projection")

  @property
  def enabled(self) -> bool:
    return self.rank > 0

  @property
  def scale(self) -> float:
    return float(self.alpha) / self.rank


def _targets(params, lora: LoraConfig) -> dict[tuple, Any]:
  """Kernel path -> kernel, for every targeted projection in `params`."""
  flat = traverse_util.flatten_dict(params)
  out = {p: v for p, v in flat.items()
         if len(p) >= 2 and p[-1] == "kernel" and p[-2] in lora.targets}
  if not out:
    raise ValueError(f"no kernel of {list(lora.targets)} in the params tree")
  return out


def _split_axes(name: str, shape) -> tuple[tuple, int, int]:
  """(leading layer axes, flattened input size, flattened output size) of a kernel."""
  lead = len(shape) - _KERNEL_NDIM[name]
  n_in = TARGET_IN_AXES[name]
  body = shape[lead:]
  return tuple(shape[:lead]), math.prod(body[:n_in]), math.prod(body[n_in:])


def init_adapters(params, lora: LoraConfig, rng=None) -> dict:
  """Fresh adapters (B = 0) for every targeted kernel of `params`, float32."""
  if not lora.enabled:
    raise ValueError("init_adapters needs model.lora.rank > 0")
  rng = jax.random.PRNGKey(lora.seed) if rng is None else rng
  out = {}
  for i, (path, kernel) in enumerate(sorted(_targets(params, lora).items())):
    lead, n_in, n_out = _split_axes(path[-2], kernel.shape)
    bound = 1.0 / math.sqrt(n_in)
    a = jax.random.uniform(jax.random.fold_in(rng, i), lead + (n_in, lora.rank), jnp.float32,
                           -bound, bound)
    out[path[:-1] + ("lora_a",)] = a
    out[path[:-1] + ("lora_b",)] = jnp.zeros(lead + (lora.rank, n_out), jnp.float32)
  return traverse_util.unflatten_dict(out)


def delta(name: str, kernel_shape, a, b, scale: float):
  """scale * A B reshaped to the kernel's shape (leading layer axes broadcast)."""
  d = jnp.matmul(a.astype(jnp.float32), b.astype(jnp.float32)) * scale
  return d.reshape(kernel_shape)


def merge(params, adapters, lora: LoraConfig):
  """The params with every adapted kernel replaced by W + scale * A B (in W's dtype)."""
  flat = traverse_util.flatten_dict(params)
  ad = traverse_util.flatten_dict(adapters)
  modules = {p[:-1] for p in ad}
  for mod in modules:
    key = mod + ("kernel",)
    if key not in flat:
      raise ValueError(f"adapter {'/'.join(mod)} has no kernel in the params tree")
    w = flat[key]
    d = delta(mod[-1], w.shape, ad[mod + ("lora_a",)], ad[mod + ("lora_b",)], lora.scale)
    flat[key] = (w.astype(jnp.float32) + d).astype(w.dtype)
  return traverse_util.unflatten_dict(flat)


def num_adapter_params(adapters) -> int:
  return sum(int(x.size) for x in jax.tree.leaves(adapters))


@dataclasses.dataclass(frozen=True)
class LoraAdapter:
  """What a trainer needs to train only adapters: split a model's params into (trainable
  adapters, frozen base) and combine them back into the params a forward takes."""
  lora: LoraConfig

  def split(self, params, rng=None) -> tuple[dict, dict]:
    return init_adapters(params, self.lora, rng), params

  def combine(self, adapters, base):
    return merge(base, adapters, self.lora)


def adapter_from_config(section) -> Optional[LoraAdapter]:
  """A `LoraAdapter` from a `model.lora` config section, or None when rank is 0."""
  from ragjax.typed_config import from_dict
  lora = from_dict(LoraConfig, section, "model.lora")
  return LoraAdapter(lora) if lora.enabled else None
