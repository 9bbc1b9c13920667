"""Stop strings with a real byte-level BPE (trained here) in which `</search>` spans several
tokens and tokenises differently after different characters."""

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from _sampling_helpers import TAG, trained_bpe
from ragjax.models.model_config import DecoderConfig
from ragjax.models.decoder import init_params
from ragjax.sampling import STOP, Sampler, SamplerConfig, compile_stop_strings, token_bytes
from ragjax.sampling.stops import MATCH, OVERHANG

PIECES = ["</", "search", ">", "x", ".", " ", TAG, ">.", "a", "\n", "se", "arch", "(", ")",
          "<", "/", "s", "</sea", "rch>", "é"]


@pytest.fixture(scope="module")
def tok():
  return trained_bpe()


@pytest.fixture(scope="module")
def table(tok):
  return compile_stop_strings([TAG], token_bytes(tok, tok.get_vocab_size())).table[0]


def test_tag_spans_several_tokens_that_depend_on_the_preceding_character(tok):
  enc = {p: tok.encode(p + TAG).tokens for p in ["x", ".", " ", ")", "a."]}
  assert all(len(t) >= 3 for t in enc.values())
  assert len({tuple(t[-3:]) for t in enc.values()}) >= 3, enc     # different tag tokenisations


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(PIECES), min_size=1, max_size=12))
def test_automaton_finds_the_first_tag_end_like_string_search(tok, table, parts):
  text = "".join(parts)
  ids = tok.encode(text).ids
  pieces = token_bytes(tok, tok.get_vocab_size())
  data = b"".join(pieces[i] for i in ids)
  assert data == text.encode("utf-8")
  state, first = 0, None
  for j, i in enumerate(ids):
    code = int(table[state, i])
    if code < 0:
      first = (j, code)
      break
    state = code
  at = data.find(TAG.encode())
  if at < 0:
    assert first is None
    return
  end = at + len(TAG)
  ends = np.cumsum([len(pieces[i]) for i in ids])
  j = int(np.searchsorted(ends, end))                 # the token holding the tag's last byte
  assert first == (j, MATCH if ends[j] == end else OVERHANG)


def _script_params(cfg, script, alt=None):
  """A bigram model that greedily continues `script` (token -> next token in the script)."""
  params = init_params(cfg, __import__("jax").random.PRNGKey(0))
  v, h = cfg.vocab_size, cfg.hidden_size
  params["embed_tokens"]["embedding"] = jnp.eye(v, h, dtype=jnp.float32)
  for name in list(params):
    if name.startswith("layers_"):
      layer = params[name]
      layer["self_attn"]["o_proj"]["kernel"] = jnp.zeros_like(layer["self_attn"]["o_proj"]["kernel"])
      layer["mlp"]["down_proj"]["kernel"] = jnp.zeros_like(layer["mlp"]["down_proj"]["kernel"])
  w = np.zeros((h, v), np.float32)
  nxt = {}
  for a, b in zip(script, script[1:]):
    assert nxt.setdefault(a, b) == b, "script is not a bigram chain"
    w[a, b] = 1.0
  for (a, b) in (alt or {}).items():
    w[a, b] = 0.5
  params["lm_head"]["kernel"] = jnp.asarray(w)
  return params


@pytest.fixture(scope="module")
def bigram_cfg(tok):
  return DecoderConfig(arch="llama", vocab_size=tok.get_vocab_size(), hidden_size=304,
                       intermediate_size=16, num_layers=1, num_heads=2, num_kv_heads=1,
                       head_dim=8, qkv_bias=False, tie_word_embeddings=False, eos_token_id=1)


def _config(**kw):
  return SamplerConfig(max_cache_length=32, max_new_tokens=12, prompt_buckets=(4,),
                       extend_buckets=(4,), greedy=True, stop_strings=("</answer>", TAG), **kw)


@pytest.mark.parametrize("text", ["Pax</search>;go", "a.</search>\nnext", "(who)</search>x",
                                  "a </search> then"])
def test_generation_ends_exactly_at_the_tag_on_device(tok, bigram_cfg, text):
  script = tok.encode(text).ids
  sampler = _sampler(tok, bigram_cfg)
  sampler.set_params(_script_params(bigram_cfg, script))
  state = sampler.prefill([script[:1]])
  state, out = sampler.decode(state)
  got = out.token_lists()[0]
  decoded = tok.decode(script[:1] + got)
  assert decoded == text[:text.index(TAG) + len(TAG)]
  assert int(out.stop_reason[0]) == STOP and int(out.stop_id[0]) == 1
  assert len(got) == len(script) - 1 - len(tok.encode(text[text.index(TAG) + len(TAG):]).ids)
  # The next turn (after an observation) starts matching afresh and runs the script on.
  state = sampler.extend(state, [0], [tok.encode(" ").ids])
  state, out = sampler.decode(state)
  assert int(out.stop_reason[0]) != STOP


_SAMPLERS = {}


def _sampler(tok, cfg, **kw):
  key = tuple(sorted(kw.items()))
  if key not in _SAMPLERS:                      # one compile per config; weights swap in
    _SAMPLERS[key] = Sampler(cfg, _script_params(cfg, [0]), tok, _config(**kw))
  return _SAMPLERS[key]


def test_a_token_running_past_the_tag_is_never_sampled(tok, bigram_cfg):
  text = "a.</search>. Then"
  script = tok.encode(text).ids
  toks = tok.encode(text).tokens
  assert ">." in toks                                   # the overhanging merge exists
  i_search = script[toks.index("search")]
  gt = tok.token_to_id(">")
  params = _script_params(bigram_cfg, script, alt={i_search: gt})
  strict = _sampler(tok, bigram_cfg)
  strict.set_params(params)
  _, out = strict.decode(strict.prefill([script[:1]]))
  got = out.token_lists()[0]
  assert tok.decode(script[:1] + got) == "a.</search>" and got[-1] == gt
  assert int(out.stop_reason[0]) == STOP
  # The returned log-prob is the model's for ">" (the second choice), not the overhang token.
  assert float(out.logprobs[0, len(got) - 1]) < -5.0
  loose = _sampler(tok, bigram_cfg, forbid_stop_overhang=False)
  loose.set_params(params)
  _, out = loose.decode(loose.prefill([script[:1]]))
  assert tok.decode(script[:1] + out.token_lists()[0]) == "a.</search>."
  assert int(out.stop_reason[0]) == STOP


def test_stop_strings_need_a_tokenizer(bigram_cfg):
  with pytest.raises(ValueError, match="need a tokenizer"):
    Sampler(bigram_cfg, _script_params(bigram_cfg, [0]), None, _config())


def test_padded_table_takes_stops_longer_than_any_token():
  """`width` pads to bytes of stop string, whatever the longest token (a stop of 4 bytes over
  tokens of at most 2 fits a table 8 wide; the padding never matches)."""
  from ragjax.sampling.stops import compile_stop_strings
  plain = compile_stop_strings(["aaab"], [b"a", b"b", b"ab"])
  padded = compile_stop_strings(["aaab"], [b"a", b"b", b"ab"], rows=2, width=8)
  assert plain.table.shape == (1, 4, 3) and padded.table.shape == (2, 8, 3)
  np.testing.assert_array_equal(padded.table[0, :4], plain.table[0])
  assert not padded.table[1].any() and not padded.table[0, 4:].any()
