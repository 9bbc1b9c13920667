"""BERT encoder against transformers: a random BERT, and the real MiniLM shipped on PyPI."""

import jax.numpy as jnp
import numpy as np
import pytest

from ragjax.models.encoder import BertEncoder, TextEncoder, default_minilm_dir, load_encoder

TEXTS = ["Who wrote the novel Dune?", "Frank Herbert wrote Dune in 1965.",
         "Ünïcödé téxt and 東京 work too", "", "a " * 400]


def _hf_mean_pool(model, tok, texts, max_length, normalize=True):
  import torch
  batch = tok(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
  with torch.no_grad():
    h = model(**batch).last_hidden_state
  m = batch["attention_mask"][..., None].float()
  out = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
  return torch.nn.functional.normalize(out, dim=-1).numpy() if normalize else out.numpy()


def test_random_bert_matches_transformers(tmp_path):
  import torch
  from transformers import BertConfig, BertModel
  torch.manual_seed(0)
  hf = BertModel(BertConfig(vocab_size=120, hidden_size=48, intermediate_size=96,
                            num_hidden_layers=2, num_attention_heads=4,
                            max_position_embeddings=64)).eval()
  hf.save_pretrained(tmp_path)
  cfg, params = load_encoder(str(tmp_path), pooling="mean", normalize=False)
  rng = np.random.RandomState(0)
  ids = rng.randint(1, 120, (3, 10))
  mask = np.ones_like(ids)
  mask[1, 6:] = 0
  mask[2, 2:] = 0
  with torch.no_grad():
    ref = hf(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).last_hidden_state.numpy()
  states = BertEncoder(cfg).apply({"params": params}, jnp.asarray(ids), jnp.asarray(mask),
                                  return_tokens=True)
  assert np.abs(np.asarray(states) - ref)[mask.astype(bool)].max() <= 1e-4
  cls_cfg = cfg.replace(pooling="cls", normalize=True)
  cls = BertEncoder(cls_cfg).apply({"params": params}, jnp.asarray(ids), jnp.asarray(mask))
  want = ref[:, 0] / np.linalg.norm(ref[:, 0], axis=-1, keepdims=True)
  np.testing.assert_allclose(np.asarray(cls), want, atol=1e-5)


def test_minilm_package_matches_transformers_mean_pooling():
  from transformers import AutoModel, AutoTokenizer
  path = default_minilm_dir()
  enc = TextEncoder.from_dir(path, batch_size=4)
  assert enc.cfg.pooling == "mean" and enc.cfg.normalize and enc.dim == 384
  ours = enc.encode(TEXTS, kind="query")
  ref = _hf_mean_pool(AutoModel.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path),
                      TEXTS, enc.cfg.max_length)
  cos = (ours * ref).sum(-1)
  assert ours.shape == (len(TEXTS), 384)
  assert cos.min() >= 0.9999, cos


def test_prefixes_are_applied_by_kind():
  enc = TextEncoder.from_dir(batch_size=2, query_prefix="query: ", passage_prefix="passage: ")
  q_ids, _ = enc.tokenize(["paris"], kind="query")
  p_ids, _ = enc.tokenize(["paris"], kind="passage")
  q_text = enc.tokenizer.decode(q_ids[0], skip_special_tokens=True)
  p_text = enc.tokenizer.decode(p_ids[0], skip_special_tokens=True)
  assert q_text.startswith("query") and p_text.startswith("passage")
  with pytest.raises(ValueError, match="kind"):
    enc.tokenize(["x"], kind="document")


def test_sharded_encoding_equals_unsharded():
  from ragjax.parallel import make_mesh
  texts = TEXTS[:3] * 3
  plain = TextEncoder.from_dir(batch_size=8).encode(texts)
  sharded = TextEncoder.from_dir(batch_size=8, mesh=make_mesh(data=2, fsdp=4)).encode(texts)
  np.testing.assert_allclose(sharded, plain, atol=1e-5)
