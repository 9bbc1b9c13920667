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

Two forwards, one set of adapters.  The sampler, the scorer and the HF export run the merged
params (`merge`): the decoder stays a pure function of one param tree, and decoding costs
exactly the base model per token (an adapter-aware decode adds two skinny matmuls per target
per layer per token, on a loop that is memory-bound); `python -m ragjax.bench.lora` measures
the merge against a decode turn.  The train step runs the adapter-aware forward
(`adapter_hidden`, `LoraConfig.forward = "adapter"`): every targeted projection computes
x W + scale (x A) B with W a constant of the differentiated function, so the backward pass
computes no param-sized weight gradient (x^T dy per kernel, a third of a dense layer's FLOPs),
only the input gradient and the adapters' two skinny ones.  `forward = "merged"` differentiates
through `merge` instead (the same gradients, to rounding; `tests/test_lora.py`).

`LoraConfig.layers = k` puts adapters on the top k decoder layers only.  The adapter-aware
forward then runs the decoder in two parts (`Decoder(..., return_hidden="residual")` over the
lower layers, `inputs_embeds` into the upper ones): the lower part depends on no trained
param, so autodiff stores none of its activations and runs no backward pass through it, and
rematerialises nothing there (`python -m ragjax.bench.grpo_step --compare-update` measures
both forwards side by side).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import traverse_util

from ragjax.models.decoder import Decoder
from ragjax.models.model_config import DecoderConfig

# Projection name -> how many leading (after any layer axis) kernel axes are inputs.
TARGET_IN_AXES = {"q_proj": 1, "k_proj": 1, "v_proj": 1, "o_proj": 2, "gate_proj": 1,
                  "up_proj": 1, "down_proj": 1}
ALL_TARGETS = tuple(TARGET_IN_AXES)
FORWARDS = ("adapter", "merged")
ADAPTER_LEAVES = ("lora_a", "lora_b")
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
  layers: int = 0                    # adapters on the top `layers` decoder layers (0: all)
  forward: str = "adapter"           # the train step's forward: "adapter" | "merged" (above)

  def __post_init__(self):
    if self.rank < 0:
      raise ValueError(f"model.lora.rank must be >= 0, got {self.rank}")
    unknown = sorted(set(self.targets) - set(TARGET_IN_AXES))
    if unknown:
      raise ValueError(f"model.lora.targets: unknown projection(s) {unknown}; known: "
                       f"{list(ALL_TARGETS)}")
    if self.rank and not self.targets:
      raise ValueError("model.lora.targets is empty; name at least one projection")
    if self.layers < 0:
      raise ValueError(f"model.lora.layers must be >= 0 (0: every layer), got {self.layers}")
    if self.forward not in FORWARDS:
      raise ValueError(f"model.lora.forward={self.forward!r}; known: {FORWARDS}")

  @property
  def enabled(self) -> bool:
    return self.rank > 0

  @property
  def scale(self) -> float:
    return float(self.alpha) / self.rank


def _layer_index(path) -> Optional[int]:
  """i of an unrolled layer's path (`layers_i/...`), None for any other path."""
  head = path[0]
  return int(head[len("layers_"):]) if head.startswith("layers_") else None


def num_layers(params) -> int:
  """Decoder layers in a params tree (stacked `layers/layer` or unrolled `layers_i`)."""
  if "layers" in params:
    return int(jax.tree.leaves(params["layers"])[0].shape[0])
  return sum(1 for k in params if k.startswith("layers_"))


def _targets(params, lora: LoraConfig) -> dict[tuple, Any]:
  """Kernel path -> kernel, for every targeted projection in `params` (of the top
  `lora.layers` layers of an unrolled tree; a stacked tree's kernels hold every layer)."""
  flat = traverse_util.flatten_dict(params)
  first = num_layers(params) - lora.layers if lora.layers else 0
  out = {p: v for p, v in flat.items()
         if len(p) >= 2 and p[-1] == "kernel" and p[-2] in lora.targets
         and (_layer_index(p) is None or _layer_index(p) >= first)}
  if not out:
    raise ValueError(f"no kernel of {list(lora.targets)} in the params tree")
  return out


def _check_layers(params, lora: LoraConfig) -> None:
  n = num_layers(params)
  if lora.layers > n:
    raise ValueError(f"model.lora.layers={lora.layers} but the model has {n} layers")


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
  _check_layers(params, lora)
  rng = jax.random.PRNGKey(lora.seed) if rng is None else rng
  out = {}
  for i, (path, kernel) in enumerate(sorted(_targets(params, lora).items())):
    lead, n_in, n_out = _split_axes(path[-2], kernel.shape)
    if lead and lora.layers:          # a stacked kernel: adapters for its top layers only
      lead = (lora.layers,) + lead[1:]
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
  """The params with every adapted kernel replaced by W + scale * A B (in W's dtype); a
  stacked kernel whose adapters cover its top k layers changes in those layers only."""
  flat = traverse_util.flatten_dict(params)
  ad = traverse_util.flatten_dict(adapters)
  modules = {p[:-1] for p in ad}
  for mod in modules:
    key = mod + ("kernel",)
    if key not in flat:
      raise ValueError(f"adapter {'/'.join(mod)} has no kernel in the params tree")
    w = flat[key]
    a, b = ad[mod + ("lora_a",)], ad[mod + ("lora_b",)]
    lead = len(w.shape) - _KERNEL_NDIM[mod[-1]]
    k = a.shape[0] if lead else 0
    if lead and k < w.shape[0]:          # top-k adapters of a stacked kernel
      top = w[w.shape[0] - k:]
      d = delta(mod[-1], top.shape, a, b, lora.scale)
      flat[key] = w.at[w.shape[0] - k:].set((top.astype(jnp.float32) + d).astype(w.dtype))
    else:
      d = delta(mod[-1], w.shape, a, b, lora.scale)
      flat[key] = (w.astype(jnp.float32) + d).astype(w.dtype)
  return traverse_util.unflatten_dict(flat)


def attach(params, adapters):
  """The params tree with each adapter's `lora_a` / `lora_b` beside its kernel: the input of
  `adapter_hidden` (not of a plain forward)."""
  flat = traverse_util.flatten_dict(params)
  for path, value in traverse_util.flatten_dict(adapters).items():
    if path[:-1] + ("kernel",) not in flat:
      raise ValueError(f"adapter {'/'.join(path[:-1])} has no kernel in the params tree")
    flat[path] = value
  return traverse_util.unflatten_dict(flat)


def _lora_interceptor(scale: float):
  """Adds scale * (x A) B to each Dense / DenseGeneral call whose params hold adapters."""

  def intercept(next_fun, args, kwargs, context):
    mod = context.module
    if (context.method_name != "__call__" or not isinstance(mod, (nn.Dense, nn.DenseGeneral))
        or not mod.has_variable("params", "lora_a")):
      return next_fun(*args, **kwargs)
    y = next_fun(*args, **kwargs)
    a = mod.get_variable("params", "lora_a")
    b = mod.get_variable("params", "lora_b")
    x = args[0].reshape(-1, a.shape[-2]).astype(jnp.float32)   # the kernel's inputs, flat
    d = jnp.matmul(jnp.matmul(x, a.astype(jnp.float32)), b.astype(jnp.float32)) * scale
    return y + d.reshape(y.shape).astype(y.dtype)

  return intercept


def _split_layers(tree, first: int, stacked: bool) -> tuple[dict, dict]:
  """(the lower `first` layers with the embedding, the rest with the final norm) of an
  attached tree, each a params tree of a decoder with that many layers; adapters go with the
  upper part (a stacked tree's adapters cover exactly its top layers)."""
  flat = traverse_util.flatten_dict(tree)
  lower, upper = {}, {}
  for path, v in flat.items():
    if stacked and path[0] == "layers":
      if path[-1] in ADAPTER_LEAVES:
        upper[path] = v
      else:
        lower[path], upper[path] = v[:first], v[first:]
    elif not stacked and _layer_index(path) is not None:
      i = _layer_index(path)
      if i < first:
        lower[path] = v
      else:
        upper[(f"layers_{i - first}",) + path[1:]] = v
    elif path[0] == "norm":
      upper[path] = v
    else:
      lower[path] = v
  return traverse_util.unflatten_dict(lower), traverse_util.unflatten_dict(upper)


def adapter_hidden(cfg: DecoderConfig, lora: LoraConfig, tree, tokens, positions=None,
                   attention_mask=None):
  """The final-normed hidden states [B, T, E] of the adapter-aware forward over an `attach`ed
  tree (module docstring): x W + scale (x A) B at every adapted projection, the layers below
  the top `lora.layers` run as a constant of the trained params."""
  top = lora.layers or cfg.num_layers
  first = cfg.num_layers - top
  if first == 0:
    with nn.intercept_methods(_lora_interceptor(lora.scale)):
      return Decoder(cfg).apply({"params": tree}, tokens, positions, attention_mask,
                                return_hidden=True)[0]
  lower, upper = _split_layers(tree, first, cfg.scan_layers)
  x, _ = Decoder(cfg.replace(num_layers=first)).apply(
      {"params": lower}, tokens, positions, attention_mask, return_hidden="residual")
  with nn.intercept_methods(_lora_interceptor(lora.scale)):
    return Decoder(cfg.replace(num_layers=top)).apply(
        {"params": upper}, tokens, positions, attention_mask, return_hidden=True,
        inputs_embeds=x)[0]


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
    """The merged params (any forward: the sampler, the scorer, the export)."""
    return merge(base, adapters, self.lora)

  def train_combine(self, adapters, base):
    """What the train step's loss takes: the attached tree (`forward="adapter"`) or the
    merged params (`"merged"`)."""
    if self.lora.forward == "merged":
      return merge(base, adapters, self.lora)
    return attach(base, adapters)

  def hidden_fn(self, cfg: DecoderConfig):
    """The train step's forward for `train_combine`'s tree: hidden(params, tokens, positions,
    attention_mask) -> [B, T, E], or None (the plain decoder) for `forward="merged"`."""
    if self.lora.forward == "merged":
      return None
    return lambda tree, tokens, positions, mask: adapter_hidden(cfg, self.lora, tree, tokens,
                                                                positions, mask)


def adapter_from_config(section) -> Optional[LoraAdapter]:
  """A `LoraAdapter` from a `model.lora` config section, or None when rank is 0."""
  from ragjax.typed_config import from_dict
  lora = from_dict(LoraConfig, section, "model.lora")
  return LoraAdapter(lora) if lora.enabled else None
