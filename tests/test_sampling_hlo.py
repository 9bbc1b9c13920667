"""The decode loop's compiled program (XLA's CPU backend, the accelerators' attention path):
the KV cache is donated and updated in place, never copied, and a decode step's fusions per
layer stay under a pinned bound, so a change that adds kernels to every layer is caught."""

import functools

import jax
import pytest

from _hlo_helpers import Program, array_type
from _model_helpers import random_params
from ragjax.models.presets import get_preset
from ragjax.parallel.mesh import make_mesh
from ragjax.sampling import Sampler, SamplerConfig

# What accelerators decode with: XLA's attention and the fused-projection weights.
CONFIG = SamplerConfig(max_cache_length=128, max_new_tokens=8, prompt_buckets=(8,),
                       extend_buckets=(8,), greedy=True, eos_ids=(), cpu_attention_kernel=False,
                       fused_projections=True)
# Fusions one more layer adds to the decode loop's body on XLA's CPU backend (jax 0.10.2,
# float32, tiny preset): 33 with separate q/k/v and gate/up projections and the softmax
# normalised over the scores; 29 now (one qkv and one gate/up matmul, the normaliser on the
# output).  One of headroom.
FUSIONS_PER_LAYER = 30


@functools.lru_cache(maxsize=None)
def _compiled_decode(layers: int, scan: bool = False, mesh=None, config=CONFIG):
  """(the decode program's HLO, the state it was lowered for); one compile per setting."""
  cfg = get_preset("tiny").replace(num_layers=layers, scan_layers=scan, eos_token_id=None)
  sampler = Sampler(cfg, random_params(cfg), None, config, mesh=mesh)
  state = sampler.prefill([[1, 2, 3]] * 8)
  program = Program.of(sampler.lower_decode(state))
  return program, state


def _in_place(program: Program, line: str) -> bool:
  """A fusion whose root writes into its operand (a scatter or dynamic-update-slice)."""
  if " fusion(" not in line:
    return False
  ops = {op for _, _, op, _ in program.instructions(program.calls(line))}
  return bool(ops & {"scatter", "dynamic-update-slice"})


@pytest.mark.parametrize("layout", ["per_layer", "stacked", "per_layer_sharded"])
def test_decode_loop_updates_the_cache_in_place(layout):
  mesh = make_mesh(data=2, fsdp=2, tensor=2) if layout.endswith("sharded") else None
  program, state = _compiled_decode(2, scan=layout == "stacked", mesh=mesh)
  leaves = jax.tree.leaves(state.cache)
  leaf = leaves[0]
  local = leaf.sharding.shard_shape(leaf.shape)
  shape = array_type(jax.ShapeDtypeStruct(local, leaf.dtype))
  # Donation: every cache array's buffer is the output's.
  params = program.entry_parameters()
  cache_params = {params[f"state.cache['{kv}']" + ("" if layout == "stacked" else f"[{i}]")]
                  for kv in "kv" for i in range(2)}
  assert len(cache_params) == len(leaves)
  assert cache_params <= program.aliased_parameters()
  # Inside the loop the cache is only written in place: no copy, no convert, no select over
  # the whole cache; one scatter per layer for the keys and one for the values.
  writes = 0
  for body in program.while_bodies():
    for op, line in program.producers(body, shape):
      assert op == "while" or _in_place(program, line), f"cache-sized {op}: {line[:200]}"
      writes += op != "while"
  assert writes == 2 * (1 if layout == "stacked" else 2)
  # ... and outside it neither (the loop takes the donated buffers as they are).
  entry = [(op, line) for op, line in program.producers(program.entry, shape) if op != "while"]
  assert entry == []


def test_decode_step_fusions_per_layer():
  """The body of a 2-layer decode loop has FUSIONS_PER_LAYER fusions more than a 1-layer
  one at most (what one more layer costs a decode step, apart from sampling and the
  unembedding)."""
  counts = []
  for layers in (1, 2):
    program, _ = _compiled_decode(layers)
    (body,) = program.while_bodies()
    counts.append(program.count(body, "fusion"))
  assert 0 < counts[1] - counts[0] <= FUSIONS_PER_LAYER, counts
