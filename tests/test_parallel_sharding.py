"""Sharded forward on 8 fake CPU devices equals the unsharded forward."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from ragjax.models.decoder import Decoder
from ragjax.models.hf_io import load_decoder
from ragjax.models.sharded import decoder_shardings, sharded_forward
from ragjax.parallel import logical_to_spec, make_mesh, shard_batch
from tests._model_helpers import padded_batch, save_hf_decoder


def test_eight_fake_devices_present():
  assert jax.device_count() == 8


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("llama"))
  save_hf_decoder("llama_scaled", path)
  return path


@pytest.mark.parametrize("mesh_shape", [(1, 8, 1), (2, 2, 2), (1, 2, 4)])
def test_sharded_forward_matches_unsharded(llama_dir, mesh_shape):
  mesh = make_mesh(*mesh_shape)
  cfg, plain = load_decoder(llama_dir)
  _, placed = load_decoder(llama_dir, shardings=lambda c: decoder_shardings(c, mesh))
  q = placed["layers_0"]["self_attn"]["q_proj"]["kernel"]
  assert q.sharding.mesh.shape == mesh.shape
  tokens, mask = padded_batch(cfg.vocab_size, (10, 8, 6, 3, 9, 1, 7, 5))
  ref, _ = Decoder(cfg).apply({"params": plain}, jnp.asarray(tokens), attention_mask=jnp.asarray(mask))
  fwd = sharded_forward(cfg, mesh, batch_size=tokens.shape[0])
  out = fwd(placed, jnp.asarray(tokens, jnp.int32), jnp.asarray(mask, jnp.int32))
  assert out.sharding.spec[0] is not None or mesh_shape[0] * mesh_shape[1] == 1
  np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=1e-5)


def test_kv_heads_split_only_where_they_divide():
  mesh = make_mesh(1, 2, 4)
  # 8 query heads split 4 ways; 2 KV heads cannot be, so they stay whole.
  assert logical_to_spec(("embed", "heads", "head_dim"), (64, 8, 8), mesh) == P("fsdp", "tensor", None)
  assert logical_to_spec(("embed", "kv_heads", "head_dim"), (64, 2, 8), mesh) == P("fsdp", None, None)
  # A vocab that does not divide is replicated rather than failing.
  assert logical_to_spec(("vocab", "embed"), (257, 64), mesh) == P(None, "fsdp")


def test_batch_sharding_helper():
  mesh = make_mesh(2, 4, 1)
  batch = {"tokens": np.zeros((8, 5), np.int32), "mask": np.ones((8, 5), np.int32)}
  placed = shard_batch(batch, mesh)
  assert placed["tokens"].sharding.spec == P(("data", "fsdp"), None)
  odd = shard_batch({"x": np.zeros((6, 2))}, mesh)  # 6 rows: data (2) divides, data*fsdp doesn't
  assert odd["x"].sharding.spec == P("data", None)


def test_mesh_errors_are_clear():
  with pytest.raises(ValueError, match="needs 16 devices"):
    make_mesh(4, 4, 1)
  with pytest.raises(ValueError, match="at most one mesh axis"):
    make_mesh(-1, -1, 1)
