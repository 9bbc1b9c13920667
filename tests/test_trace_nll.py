"""The copy-or-memorise probe: token grouping by tag region and name pieces, and NLL sums that
match an unbatched reference forward pass."""

import collections

import jax
import numpy as np

from ragjax.data.tokenizer import train_world_tokenizer
from ragjax.data.world import WorldConfig, generate_world
from ragjax.models.model_config import DecoderConfig
from ragjax.models.decoder import Decoder, init_params
from ragjax.eval.trace_nll import nll_table, token_kinds, trace_nll
from ragjax.rollout.labels import Source


def test_token_kinds_by_hand():
  pieces = ["Q", ":", " Where", " was", " Bra", "ko", "tel", " born", "?", "<search>", " where",
            " Bra", "ko", "tel", "</search>", "<information>", " Bra", "</information>",
            "<answer>", " Ka", "vi", " 1850", "</answer>", " done"]
  regions, kinds = token_kinds(pieces)
  assert regions == ["other"] * 9 + ["tag"] + ["search"] * 4 + ["tag", "tag", "other", "tag",
                                                                 "tag", "answer", "answer",
                                                                 "answer", "tag", "other"]
  assert kinds[4:7] == ["name"] * 3 and kinds[7] == "word" and kinds[8] == "word"
  assert kinds[10:14] == ["word", "name", "name", "name"]
  assert kinds[19:22] == ["name", "name", "word"] and kinds[23] == "word"


def test_matches_an_unbatched_reference():
  world = generate_world(WorldConfig(num_people=20, num_places=6, num_orgs=5, num_works=8,
                                     retry_groups=3, num_train=20, num_dev=4, num_test=8))
  tok = train_world_tokenizer(None, world=world, vocab_size=600)
  cfg = DecoderConfig(arch="qwen2", vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                      num_layers=2, num_heads=2, num_kv_heads=1, head_dim=16)
  params = init_params(cfg, jax.random.PRNGKey(0))
  rng = np.random.default_rng(0)
  rows_t, rows_l = [], []
  for ex in world.questions["train"][:5]:
    text = (f"{ex.question}<search> {ex.metadata['hops'][0]['query']}</search>"
            f"<information> {world.passages[0]['contents']}</information>"
            f"<answer> {ex.golden_answers[0]}</answer>")
    ids = np.asarray(tok.encode(text, add_special_tokens=False), np.int32)
    labels = np.full(len(ids), int(Source.PROMPT), np.int8)
    labels[len(tok.encode(ex.question, add_special_tokens=False)):] = int(Source.POLICY)
    labels[rng.random(len(ids)) < 0.2] = int(Source.RETRIEVED)
    rows_t.append(ids)
    rows_l.append(labels)
  got = trace_nll(cfg, params, tok, rows_t, rows_l, batch_size=2)   # 3 batches, last padded
  sums, counts = collections.defaultdict(float), collections.defaultdict(int)
  forward = jax.jit(lambda p, t: Decoder(cfg).apply({"params": p}, t)[0])   # one row at a time
  for t, lab in zip(rows_t, rows_l):
    logits = forward(params, t[None])[0]
    logp = np.asarray(jax.nn.log_softmax(logits, -1))
    regions, kinds = token_kinds([tok.decode([int(x)]) for x in t])
    for j in range(1, len(t)):
      if lab[j] == Source.POLICY:
        sums[(regions[j], kinds[j])] -= logp[j - 1, t[j]]
        counts[(regions[j], kinds[j])] += 1
  assert set(got) == set(counts) and ("search", "name") in got and ("answer", "word") in got
  for k, (c, v) in got.items():
    assert c == counts[k]
    np.testing.assert_allclose(v, sums[k] / counts[k], rtol=1e-4, atol=1e-4)
  table = nll_table({"train": got, "test": {}})
  assert "| search | name |" in table and "nan (0)" in table
