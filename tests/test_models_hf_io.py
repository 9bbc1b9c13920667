"""HF checkpoint import/export: round trips through transformers, and clear errors on bad input."""

import json
import os

import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from ragjax.models.decoder import Decoder
from ragjax.models.hf_io import load_decoder, save_decoder
from ragjax.models.presets import get_preset, resolve_decoder_config
from ragjax.models.safetensors_io import CheckpointError, SafetensorsReader
from tests._model_helpers import padded_batch, save_hf_decoder, torch_logits


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("qwen"))
  save_hf_decoder("qwen2_tied", path)
  return path


@pytest.mark.parametrize("kind", ["qwen2_tied", "llama_scaled"])
def test_export_loads_in_transformers_with_same_logits(kind, tmp_path):
  from transformers import AutoModelForCausalLM
  src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
  save_hf_decoder(kind, src)
  cfg, params = load_decoder(src, scan_layers=(kind == "llama_scaled"))
  save_decoder(dst, cfg, params)
  reloaded = AutoModelForCausalLM.from_pretrained(dst).eval()
  tokens, mask = padded_batch(cfg.vocab_size, (9, 4))
  ours, _ = Decoder(cfg).apply({"params": params}, jnp.asarray(tokens),
                               attention_mask=jnp.asarray(mask))
  ref = torch_logits(reloaded, tokens, mask)
  assert np.abs(np.asarray(ours) - ref)[mask.astype(bool)].max() <= 1e-4


def test_sharded_index_round_trip(qwen_dir, tmp_path):
  cfg, params = load_decoder(qwen_dir)
  out = str(tmp_path / "sharded")
  save_decoder(out, cfg, params, max_shard_bytes=20_000)
  with open(os.path.join(out, "model.safetensors.index.json")) as f:
    files = set(json.load(f)["weight_map"].values())
  assert len(files) > 1
  cfg2, params2 = load_decoder(out)
  assert cfg2 == cfg
  for a, b in zip(__import__("jax").tree.leaves(params), __import__("jax").tree.leaves(params2)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_bfloat16_checkpoint_loads(qwen_dir, tmp_path):
  cfg, params = load_decoder(qwen_dir)
  out = str(tmp_path / "bf16")
  save_decoder(out, cfg, params, dtype="bfloat16")
  reader = SafetensorsReader(out)
  assert str(reader.get("model.norm.weight").dtype) == "bfloat16"
  cfg16, p16 = load_decoder(out, param_dtype="bfloat16", dtype="bfloat16")
  assert p16["norm"]["scale"].dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(p16["norm"]["scale"], np.float32),
                             np.asarray(params["norm"]["scale"]), rtol=1e-2)


def _rewrite(src_dir, dst_dir, edit):
  os.makedirs(dst_dir)
  tensors = load_file(os.path.join(src_dir, "model.safetensors"))
  edit(tensors)
  save_file(tensors, os.path.join(dst_dir, "model.safetensors"))
  with open(os.path.join(src_dir, "config.json")) as f:
    cfg = json.load(f)
  with open(os.path.join(dst_dir, "config.json"), "w") as f:
    json.dump(cfg, f)


def test_missing_tensor_is_named(qwen_dir, tmp_path):
  _rewrite(qwen_dir, str(tmp_path / "m"), lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
  with pytest.raises(CheckpointError, match=r"missing tensor 'model\.layers\.1\.mlp\.up_proj\.weight'"
                     r" \(expected shape \(112, 64\)\)"):
    load_decoder(str(tmp_path / "m"))


def test_extra_tensor_is_named(qwen_dir, tmp_path):
  def add(t):
    t["model.layers.0.self_attn.extra.weight"] = np.zeros((3, 5), np.float32)
  _rewrite(qwen_dir, str(tmp_path / "e"), add)
  with pytest.raises(CheckpointError, match=r"unexpected tensor 'model\.layers\.0\.self_attn\.extra"
                     r"\.weight' with shape \(3, 5\)"):
    load_decoder(str(tmp_path / "e"))


def test_misshaped_tensor_names_both_shapes(qwen_dir, tmp_path):
  def bad(t):
    t["model.layers.0.self_attn.k_proj.weight"] = np.zeros((16, 64), np.float32)
  _rewrite(qwen_dir, str(tmp_path / "s"), bad)
  with pytest.raises(CheckpointError, match=r"'model\.layers\.0\.self_attn\.k_proj\.weight' has shape "
                     r"\(16, 64\), expected \(32, 64\)"):
    load_decoder(str(tmp_path / "s"))


def _copy_dir(src_dir, dst_dir):
  import shutil
  shutil.copytree(src_dir, dst_dir)
  return str(dst_dir)


def _write_header(path, header_len: int, header: bytes, data: bytes = b""):
  with open(path, "wb") as f:
    f.write(header_len.to_bytes(8, "little") + header + data)


def test_corrupt_safetensors_header_is_named_not_a_memory_error(qwen_dir, tmp_path):
  """Issue 46 item 14: a header length larger than the file was read as is (a MemoryError)."""
  d = _copy_dir(qwen_dir, tmp_path / "c")
  st = os.path.join(d, "model.safetensors")
  tensor = json.dumps({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 8]}}).encode()
  for header_len, header, why in (
      (2 ** 62, b"{}", "header of 4611686018427387904 bytes"),     # garbage length
      (100, b"{}", "header of 100 bytes"),                          # past the end of the file
      (None, b"not json!", "header is not JSON"),
      (None, b"[]", "header is not a JSON object"),
      (None, tensor, "tensor 'w'")):                                # 24 bytes of shape, 8 held
    _write_header(st, len(header) if header_len is None else header_len, header, b"\0" * 8)
    with pytest.raises(CheckpointError) as e:
      SafetensorsReader(d)
    assert st in str(e.value) and why in str(e.value), str(e.value)
  with open(st, "wb") as f:
    f.write(b"\x01\x02")                                           # shorter than a length
  with pytest.raises(CheckpointError, match="model.safetensors: 2 bytes, too short"):
    load_decoder(d)


def test_sharded_weight_map_cannot_leave_the_checkpoint_directory(qwen_dir, tmp_path):
  """Issue 46 item 15: `weight_map` named `../../../../etc/passwd` and it was opened."""
  cfg, params = load_decoder(qwen_dir)
  out = str(tmp_path / "sharded")
  save_decoder(out, cfg, params, max_shard_bytes=20_000)
  index = os.path.join(out, "model.safetensors.index.json")
  with open(index) as f:
    good = json.load(f)
  for target in ("../../../../etc/passwd", "/etc/passwd", "sub/../../x.safetensors"):
    bad = dict(good, weight_map={**good["weight_map"], "model.norm.weight": target})
    with open(index, "w") as f:
      json.dump(bad, f)
    with pytest.raises(CheckpointError, match=r"model\.safetensors\.index\.json.*"
                       r"'model\.norm\.weight'.*outside the checkpoint directory"):
      load_decoder(out)
  with open(index, "w") as f:
    f.write("{not json")
  with pytest.raises(CheckpointError, match=r"model\.safetensors\.index\.json is not JSON"):
    load_decoder(out)


def test_shard_linked_outside_the_directory_and_unknown_dtype_are_refused(qwen_dir, tmp_path):
  """Issue 56 item 5: a shard that is a symlink to a file outside the checkpoint was followed
  (its header read, its size reported), and a tensor of dtype `F99` passed `check_decoder_dir`.
  A Hugging Face cache snapshot (`snapshots/REV/x -> ../../blobs/H`) still loads."""
  from ragjax.models.hf_io import check_decoder_dir
  cfg, params = load_decoder(qwen_dir)
  out = str(tmp_path / "sharded")
  save_decoder(out, cfg, params, max_shard_bytes=20_000)
  with open(os.path.join(out, "model.safetensors.index.json")) as f:
    shard = sorted(set(json.load(f)["weight_map"].values()))[0]
  outside = str(tmp_path / "outside.safetensors")
  os.replace(os.path.join(out, shard), outside)
  os.symlink(outside, os.path.join(out, shard))
  with pytest.raises(CheckpointError, match=rf"{shard}.*a link to {outside}, outside the "
                     r"checkpoint directory"):
    check_decoder_dir(out)
  single = _copy_dir(qwen_dir, tmp_path / "single")
  st = os.path.join(single, "model.safetensors")
  os.replace(st, outside)
  os.symlink(outside, st)
  with pytest.raises(CheckpointError, match="outside the checkpoint directory"):
    check_decoder_dir(single)
  # the Hugging Face cache's layout: the snapshot's files link into the cache's blobs/
  snap = tmp_path / "models--x" / "snapshots" / "rev"
  os.makedirs(tmp_path / "models--x" / "blobs")
  _copy_dir(qwen_dir, snap)
  os.replace(snap / "model.safetensors", tmp_path / "models--x" / "blobs" / "h1")
  os.symlink("../../blobs/h1", snap / "model.safetensors")
  check_decoder_dir(str(snap))
  # a dtype safetensors does not have
  d = _copy_dir(qwen_dir, tmp_path / "f99")
  tensor = json.dumps({"w": {"dtype": "F99", "shape": [2], "data_offsets": [0, 8]}}).encode()
  _write_header(os.path.join(d, "model.safetensors"), len(tensor), tensor, b"\0" * 8)
  with pytest.raises(CheckpointError, match=r"tensor 'w' has unknown dtype 'F99'"):
    check_decoder_dir(d)


def test_truncated_safetensors_names_the_file_and_the_tensor(qwen_dir, tmp_path):
  """Issue 46 item 16: a cut file said `cannot reshape array of size 0 into shape (64,)`."""
  d = _copy_dir(qwen_dir, tmp_path / "t")
  st = os.path.join(d, "model.safetensors")
  size = os.path.getsize(st)
  with open(st, "r+b") as f:
    f.truncate(size - 100)
  with pytest.raises(CheckpointError, match=rf"{st} is truncated: .*{size - 100} bytes.*tensors "
                     rf"need {size}"):
    load_decoder(d)


def test_unsupported_architecture_lists_supported(qwen_dir, tmp_path):
  d = tmp_path / "mistral"
  d.mkdir()
  with open(os.path.join(qwen_dir, "config.json")) as f:
    cfg = json.load(f)
  cfg["model_type"], cfg["architectures"] = "mistral", ["MistralForCausalLM"]
  (d / "config.json").write_text(json.dumps(cfg))
  with pytest.raises(ValueError, match=r"unsupported architecture model_type='mistral'.*qwen2.*llama"):
    load_decoder(str(d))


def test_checkpoint_config_wins_over_preset(qwen_dir):
  cfg = resolve_decoder_config(qwen_dir)
  assert cfg.hidden_size == 64 and cfg.vocab_size == 256
  assert resolve_decoder_config("qwen2.5-0.5b").hidden_size == 896
  with pytest.raises(ValueError, match="unknown model preset"):
    get_preset("gpt-5")


def test_presets_have_published_sizes():
  # Parameter counts of the public checkpoints (embedding included), to within 1%.
  published = {"qwen2.5-0.5b": 494e6, "qwen2.5-1.5b": 1.54e9, "qwen2.5-3b": 3.09e9,
               "qwen2.5-7b": 7.62e9, "llama-3.2-3b": 3.21e9, "llama-3.1-8b": 8.03e9}
  for name, n in published.items():
    got = get_preset(name).num_params()
    assert abs(got - n) / n < 0.01, (name, got, n)
