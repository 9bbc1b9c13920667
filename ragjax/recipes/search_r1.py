"""The Search-R1 recipe (and the method configs built on it): GRPO or PPO over the real engine.

`python -m ragjax.train --config=configs/search_r1.py:tiny` runs it on CPU against the synthetic
world (no weights or corpus to download); real sizes point `model.checkpoint` at an HF
directory, `data.train_files` / `data.dev_files` at dataset files (FlashRAG jsonl, verl
parquet) and `retriever.index` (or `retriever.url`) at an index or a Search-R1 server.
"""

from __future__ import annotations

import json
import os

import jax

from ragjax.models.config import DecoderConfig
from ragjax.models.decoder import Decoder, dummy_inputs, init_params
from ragjax.recipes import world as world_recipe
from ragjax.rl.config import OptimConfig, RLConfig, RunConfig, TrainerConfig, from_dict
from ragjax.rl.engine_rollout import EngineRollout, as_record
from ragjax.rl.trainer import Trainer
from ragjax.rollout.engine import EngineConfig, RolloutEngine
from ragjax.rollout.protocols import get_protocol
from ragjax.sampling.config import SamplerConfig
from ragjax.sampling.sampler import Sampler


def load_data(c, workdir: str):
  """(train, dev, retriever, tokenizer-or-None) from the world or from dataset files."""
  if c.data.source == "world":
    world, paths, tok = world_recipe.prepare_world(c, workdir)
    retriever = world_recipe.build_retriever(c, paths["corpus"], workdir)
    return world.questions["train"], world.questions["dev"], retriever, tok
  from ragjax.evaluate import _read_examples
  train = [e for f in c.data.train_files for e in _read_examples(f, None)]
  dev = [e for f in c.data.dev_files for e in _read_examples(f, None)]
  if c.retriever.url:
    from ragjax.retrieval import SearchClient
    retriever = SearchClient(c.retriever.url)
  else:
    from ragjax.retrieval import open_index
    retriever = open_index(c.retriever.index, cache_size=c.retrieval.cache_size)
  return train, dev, retriever, None


def load_policy(c, tok):
  """(cfg, params, tokenizer): an HF checkpoint, or a preset shape with random weights."""
  from ragjax.models.hf_io import load_decoder, load_tokenizer
  from ragjax.models.presets import get_preset
  m = c.model
  overrides = dict(dtype=m.dtype, param_dtype=m.param_dtype, scan_layers=m.scan_layers,
                   remat=m.remat)
  if m.checkpoint:
    cfg, params = load_decoder(m.checkpoint, **overrides)
    return cfg, params, load_tokenizer(m.checkpoint)
  if tok is None:
    raise ValueError("model.checkpoint is empty and the data has no tokenizer; set "
                     "model.checkpoint to an HF directory")
  cfg = get_preset(m.preset).replace(vocab_size=len(tok), eos_token_id=tok.eos_token_id,
                                     **overrides)
  return cfg, init_params(cfg, jax.random.PRNGKey(c.trainer.seed)), tok


def make_engine(c, cfg: DecoderConfig, params, tok, retriever, greedy: bool) -> RolloutEngine:
  r = c.rollout
  protocol = get_protocol(r.protocol, top_k=c.retriever.topk, max_turns=r.max_turns,
                          obs_max_tokens=r.max_obs_length)
  scfg = SamplerConfig(max_cache_length=r.max_prompt_length, max_new_tokens=r.max_response_length,
                       prompt_buckets=tuple(b for b in (64, 128, 256, 384, 512, 1024, 2048, 4096)
                                            if b <= r.max_start_length) or (r.max_start_length,),
                       temperature=r.temperature, top_p=r.top_p, greedy=greedy,
                       stop_strings=protocol.stop_sequences, eos_ids=tuple(cfg.eos_ids) or None)
  return RolloutEngine(protocol, Sampler(cfg, params, tok, scfg), retriever, tok,
                       EngineConfig(pad_id=tok.pad_token_id or 0))


def run(c) -> dict:
  workdir = os.path.abspath(c.trainer.workdir)
  os.makedirs(workdir, exist_ok=True)
  train, dev, retriever, tok = load_data(c, workdir)
  cfg, params, tok = load_policy(c, tok)
  run_cfg = RunConfig(rl=from_dict(RLConfig, c.rl), optim=from_dict(OptimConfig, c.optim),
                      trainer=from_dict(TrainerConfig, c.trainer),
                      critic_optim=None if c.critic_optim is None
                      else from_dict(OptimConfig, c.critic_optim))
  widths = tuple(range(64, c.rollout.max_prompt_length + 1, 64))
  rollout = EngineRollout(make_engine(c, cfg, params, tok, retriever, False),
                          run_cfg.rl.group_size, widths)
  greedy = EngineRollout(make_engine(c, cfg, params, tok, retriever, True), 1, widths)
  critic = None
  if run_cfg.rl.uses_critic:      # PPO: a value model initialised from the policy's body
    critic = Decoder(cfg, head="value").init(jax.random.PRNGKey(1), dummy_inputs())["params"]
    body = {k: v for k, v in params.items() if k in critic and k != "value_head"}
    critic = jax.tree.map(lambda x: x.copy(), {**dict(critic), **body})
  trainer = Trainer(model_cfg=cfg, run=run_cfg, params=params, rollout_fn=rollout,
                    eval_rollout_fn=lambda p, prompts, rng: greedy(p, prompts, rng, 1),
                    train_data=[as_record(e, i) for i, e in enumerate(train)],
                    dev_data=[as_record(e, i) for i, e in enumerate(dev)],
                    fingerprint={"config": json.loads(c.to_json_best_effort())},
                    critic_params=critic)
  history = trainer.train()
  trainer.ckpt.close()
  return {"steps": len(history), "workdir": workdir,
          "last": history[-1] if history else {}}
