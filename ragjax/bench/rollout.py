"""Multi-turn rollout throughput: what extending the KV cache buys over the loops people use.

    python -m ragjax.bench.rollout                          # small model, 4 turns, batch 8, CPU
    python -m ragjax.bench.rollout --turns 2,4,6            # one JSON line per setting
    python -m ragjax.bench.rollout --doc-tokens 300         # long documents
    python -m ragjax.bench.rollout --preset qwen2.5-3b --batch 256     # GPU
    python -m ragjax.bench.rollout --decode-chunk 32 --retrieval-query-ms 10   # overlap

Same weights, tokenizer, retriever, prompts and protocol (Search-R1: `max_turns` searches, top-3
documents of ~`--doc-tokens` tokens, then the final no-search turn), greedy, three loops in
the same run:

1. `engine`: `ragjax.rollout.engine.RolloutEngine` over the JAX `Sampler` (documents appended
   into the live KV cache with `extend`);
2. `reprefill`: the same engine and sampler, but every turn re-prefills each live row's whole
   history (`ragjax.bench.rollout_policies.RePrefillPolicy`): the design without extend;
3. `transformers`: `generate` per turn on the full re-tokenised history, batched, with stop
   strings (`ragjax.bench.hf_loop`), on the same weights exported with
   `ragjax.models.hf_io.save_decoder` and loaded with `AutoModelForCausalLM.from_pretrained`.

The policy is a random decoder with the Search-R1 grammar planted into it
(`ragjax.bench.planted`): it searches every turn, with think and query lengths and words that
depend on the question and the documents.  The retriever is BM25 (`ragjax.retrieval`, no
cache) over the 31k-passage corpus of ../shared/data cut into `--doc-tokens`-token documents,
or over the synthetic world's passages when that folder is absent (`--corpus`).

With `--decode-chunk N` the engine decodes N steps per call and sends each row's search to a
retrieval thread when its turn ends (`EngineConfig.decode_chunk`), and a fourth loop,
`whole_turns`, is the same engine with whole turns;
the line adds `ratio_engine_vs_whole_turns`, and each engine loop its `retrieval_call_s` (time
inside retriever calls) beside the time the loop waited for them (`time_s.retrieval`) and the
share hidden behind decoding (`retrieval_overlap`), and the count of retriever calls that
ran while other rows decoded (`searches_behind_decoding`).  `--retrieval-ms` / `--retrieval-query-ms`
add latency per call / per query, as a retrieval server on another host has (the local BM25
index answers a turn's queries in a few milliseconds).

Each loop runs once to warm up (compiles), then `--repeats` times, the three loops alternating
so they share the machine's load; the best run of each is kept.  The transformers loop is
warmed up at every `--torch-threads` count (default 1 and all cores; on a loaded CPU PyTorch's
OpenMP threads spin against the other processes and one thread can be 4x faster) and timed
at the fastest, so the reference is not handicapped by the machine.  The run checks the loops
produce identical trajectories (tokens of every row; for engine vs reprefill also the
sampler log-probs, within `LOGPROB_TOL`) and prints one JSON line per setting:
trajectories/s, policy tokens/s, model positions computed (padded rows x tokens, by prefill /
decode / extend) and real tokens fed, the time split (prefill / decode / extend / retrieval /
host) and the ratios engine/reprefill and engine/transformers (throughput).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import functools
import json
import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import jax  # noqa: E402
import numpy as np  # noqa: E402

from ragjax.bench.hf_loop import ForwardTimer, hf_rollout  # noqa: E402
from ragjax.bench.planted import Grammar, grammar_table, plant  # noqa: E402
from ragjax.bench.rollout_env import build_env  # noqa: E402
from ragjax.bench.rollout_policies import RePrefillPolicy, TimedPolicy  # noqa: E402
from ragjax.models.model_config import DecoderConfig  # noqa: E402
from ragjax.models.decoder import init_params  # noqa: E402
from ragjax.models.presets import get_preset  # noqa: E402
from ragjax.rollout.engine import EngineConfig, RolloutEngine  # noqa: E402
from ragjax.rollout.labels import Source  # noqa: E402
from ragjax.rollout.protocols.base import PromptInput  # noqa: E402
from ragjax.rollout.protocols.search_r1 import SearchR1  # noqa: E402
from ragjax.rollout.renderer import Renderer  # noqa: E402
from ragjax.sampling import Sampler, SamplerConfig  # noqa: E402

LOGPROB_TOL = 1e-3
LOOPS = ("engine", "reprefill", "transformers")

# Bench shapes (besides ragjax.models.presets): `small` runs the default in a few minutes on
# two CPU cores; `test` is for the unit test.  Vocabulary: the tokenizer trained in the run.
SHAPES = {
    "small": dict(hidden_size=256, intermediate_size=704, num_layers=4, num_heads=4,
                  num_kv_heads=2, head_dim=64),
    "test": dict(hidden_size=96, intermediate_size=192, num_layers=2, num_heads=4,
                 num_kv_heads=2, head_dim=24),
}


def model_config(preset: str, vocab: int, dtype: str) -> DecoderConfig:
  if preset in SHAPES:
    cfg = DecoderConfig(arch="qwen2", vocab_size=vocab, rope_theta=10_000.0,
                        tie_word_embeddings=True, max_position_embeddings=32768,
                        **SHAPES[preset])
  else:
    cfg = get_preset(preset)
    if cfg.vocab_size < vocab:
      raise ValueError(f"preset {preset} has {cfg.vocab_size} ids; the bench tokenizer has "
                       f"{vocab} (lower --vocab)")
  return cfg.replace(dtype=dtype, param_dtype=dtype, eos_token_id=None, scan_layers=False,
                     remat=False)


def buckets(step: int, top: int, first=()) -> tuple[int, ...]:
  return tuple(sorted(set(first) | set(range(step, top + 1, step)) | {top}))


class Setup:
  """Everything the three loops share for one (doc_tokens, preset) pair."""

  def __init__(self, args, workdir: str):
    on_gpu = jax.default_backend() == "gpu"
    self.dtype = args.dtype or ("bfloat16" if on_gpu else "float32")
    vocab = args.vocab if args.preset in SHAPES else min(args.vocab,
                                                         get_preset(args.preset).vocab_size)
    self.env = build_env(args.corpus, max(args.batch_list), args.doc_tokens, vocab, workdir)
    tok = self.tokenizer = self.env.tokenizer
    cfg = model_config(args.preset, len(tok), self.dtype).replace(
        attention_impl=getattr(args, "attention_impl", ""))
    think = args.think_tokens
    self.grammar = Grammar(think_min=max(1, think // 3), think_max=think,
                           query_max=args.query_words, query_min=min(2, args.query_words),
                           context_dims=min(16, cfg.head_dim, cfg.hidden_size // 8))
    probe_protocol = SearchR1(top_k=args.top_k, max_turns=1)
    renderer = Renderer(probe_protocol, tok, chat=False)
    self.prompts = [renderer.prompt_ids(q) for q in self.env.questions]
    framing, _, _ = renderer.tokenize(probe_protocol.observation(
        "q", [{"id": "0", "contents": '"T"\nx'}] * args.top_k))
    start = {p[-1] for p in self.prompts} | {framing[-1]}
    fixed = set(renderer.prompt_ids(PromptInput(""))) | set(framing)
    table = grammar_table(tok, cfg.vocab_size, self.grammar, sorted(start), sorted(fixed))
    params = init_params(cfg, jax.random.PRNGKey(args.seed))
    self.cfg, self.params = plant(cfg, params, table, self.grammar, seed=args.seed)
    # Documents are ~doc_tokens plus a title line; the observation cap only guards.
    self.obs_cap = args.top_k * (args.doc_tokens + 64) + 32
    self.hf_dir = os.path.join(workdir, "hf_policy")
    self._hf = None
    self.args = args

  def sampler(self, turns: int, cpu_kernel: bool = True) -> Sampler:
    budget = self.grammar.max_turn_tokens + 4          # the grammar always stops before it
    need = max(len(p) for p in self.prompts) + (turns + 1) * budget + turns * (self.obs_cap + 16)
    cache = -(-need // 128) * 128
    step = self.args.attend_step
    scfg = SamplerConfig(
        max_cache_length=cache, max_new_tokens=budget, greedy=True,
        attend_buckets=buckets(step, cache) if step else None,
        prompt_buckets=buckets(64, cache), extend_buckets=buckets(64, self.obs_cap + 16, (16, 32)),
        stop_strings=SearchR1().stop_sequences, eos_ids=(self.tokenizer.eos_token_id,),
        cpu_attention_kernel=cpu_kernel,
        fused_projections={"auto": None, "on": True, "off": False}[
            getattr(self.args, "fused_projections", "auto")],
        decode_attention=getattr(self.args, "decode_attention", "xla"))
    return Sampler(self.cfg, jax.device_put(self.params), self.tokenizer, scfg)

  def hf_model(self):
    if self._hf is None:
      import torch
      from transformers import AutoModelForCausalLM
      from ragjax.models.hf_io import load_tokenizer, save_decoder
      save_decoder(self.hf_dir, self.cfg, self.params, tokenizer=self.tokenizer)
      device = "cuda" if torch.cuda.is_available() else "cpu"
      model = AutoModelForCausalLM.from_pretrained(self.hf_dir, dtype=getattr(torch, self.dtype))
      model = model.to(device).eval()
      tok = load_tokenizer(self.hf_dir)
      with torch.no_grad():                       # torch's first call pays one-time costs
        ids = torch.tensor([self.prompts[0]], device=device)
        model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=2,
                       do_sample=False, pad_token_id=tok.pad_token_id)
      self._hf = (model, tok, ForwardTimer(model), device)
    return self._hf


class DelayedRetriever:
  """The retriever with latency added to every call, `per_call` seconds plus `per_query`
  seconds per query, as a retrieval server on another host adds (a round trip, and a
  21M-passage index searched query by query)."""

  def __init__(self, retriever, per_call: float, per_query: float = 0.0):
    self.retriever, self.per_call, self.per_query = retriever, per_call, per_query

  def search(self, queries, k):
    time.sleep(self.per_call + self.per_query * len(queries))
    return self.retriever.search(queries, k)


def _engine_run(engine, timed, prompts):
  timed.reset()
  t0 = time.perf_counter()
  batch = engine.run(prompts)
  wall = time.perf_counter() - t0
  split = {k: timed.seconds[k] for k in ("prefill", "decode", "extend")}
  split["retrieval"] = batch.timings["retrieval_wait_s"]      # what the loop waited for
  split["host"] = wall - sum(split.values())
  return batch, {"wall_s": wall, "time_s": split,
                 "retrieval_call_s": batch.timings["retrieval_s"],
                 "searches_behind_decoding": batch.stats.get("searches_behind_decoding", 0),
                 "tokens_processed": dict(timed.positions), "tokens_fed": dict(timed.tokens)}


def _hf_run(setup, protocol, retriever, prompts, budget, threads):
  import torch
  model, tok, timer, device = setup.hf_model()
  torch.set_num_threads(threads)
  timer.reset()
  timings = collections.Counter()
  t0 = time.perf_counter()
  texts = hf_rollout(model, tok, protocol, retriever, prompts, budget, timings)
  if device == "cuda":
    torch.cuda.synchronize()
  wall = time.perf_counter() - t0
  split = {"prefill": timer.seconds["prefill"], "decode": timer.seconds["decode"], "extend": 0.0,
           "retrieval": timings["retrieval_s"]}
  split["host"] = wall - sum(split.values())
  return texts, {"wall_s": wall, "time_s": split, "tokens_processed": dict(timer.positions),
                 "torch_threads": threads,
                 "host_in_generate_s": timings["generate_s"] - timer.seconds["prefill"]
                 - timer.seconds["decode"]}


def compare(engine_batch, reprefill_batch, hf_texts, hf_tokenizer) -> dict:
  """Row-by-row token identity of the three trajectories (`hf_texts` None: two), the
  engine-vs-reprefill log-prob difference on policy tokens, and no truncated observation."""
  ta, tb = engine_batch.traj, reprefill_batch.traj
  la, lb = np.asarray(ta.lengths), np.asarray(tb.lengths)
  toks_a, toks_b = np.asarray(ta.tokens), np.asarray(tb.tokens)
  rows = len(la)
  same_b = [la[r] == lb[r] and np.array_equal(toks_a[r, :la[r]], toks_b[r, :lb[r]])
            for r in range(rows)]
  same_c = [True] * rows if hf_texts is None else [
      hf_tokenizer(hf_texts[r])["input_ids"] == toks_a[r, :la[r]].tolist() for r in range(rows)]
  policy = np.asarray(ta.labels) == int(Source.POLICY)
  diff = 0.0
  if all(same_b):
    diff = float(np.abs(np.asarray(ta.sampler_logprobs) - np.asarray(tb.sampler_logprobs))[policy]
                 .max(initial=0.0))
  truncated = any(rec.obs_truncated for row in engine_batch.rows for rec in row.turns)
  identical = {"reprefill": int(sum(same_b)), "of": rows}
  if hf_texts is not None:
    identical["transformers"] = int(sum(same_c))
  return {"rows_identical": identical,
          "max_logprob_diff_reprefill": round(diff, 7),
          "identical": bool(all(same_b) and all(same_c) and diff <= LOGPROB_TOL
                            and not truncated)}


def run_setting(setup: Setup, turns: int, batch: int, repeats: int, skip_hf: bool) -> dict:
  args = setup.args
  protocol = SearchR1(top_k=args.top_k, max_turns=turns, obs_max_tokens=setup.obs_cap)
  sampler = setup.sampler(turns)
  timed_a, timed_b = TimedPolicy(sampler), TimedPolicy(sampler)
  econf = EngineConfig(chat=False)
  retriever = setup.env.retriever
  if args.retrieval_ms or args.retrieval_query_ms:
    retriever = DelayedRetriever(retriever, args.retrieval_ms / 1e3, args.retrieval_query_ms / 1e3)
  engine = RolloutEngine(protocol, timed_a, retriever, setup.tokenizer,
                         dataclasses.replace(econf, decode_chunk=args.decode_chunk))
  rep_policy = RePrefillPolicy(timed_b, rows_per_prefill=args.reprefill_rows)
  reprefill = RolloutEngine(protocol, rep_policy, retriever, setup.tokenizer, econf)
  prompts = setup.env.questions[:batch]
  runs = {"engine": lambda: _engine_run(engine, timed_a, prompts),
          "reprefill": lambda: _engine_run(reprefill, timed_b, prompts)}
  if args.decode_chunk:            # the same engine with whole turns, as the reference
    timed_c = TimedPolicy(sampler)
    whole = RolloutEngine(protocol, timed_c, retriever, setup.tokenizer, econf)
    runs["whole_turns"] = lambda: _engine_run(whole, timed_c, prompts)
  if args.xla_attention:           # the same engine with XLA's attention, as the reference
    timed_x = TimedPolicy(setup.sampler(turns, cpu_kernel=False))
    xla = RolloutEngine(protocol, timed_x, retriever, setup.tokenizer,
                        dataclasses.replace(econf, decode_chunk=args.decode_chunk))
    runs["engine_xla_attention"] = lambda: _engine_run(xla, timed_x, prompts)
  for n in ([] if skip_hf else args.torch_threads):
    runs[f"transformers@{n}"] = functools.partial(_hf_run, setup, protocol, retriever, prompts,
                                                  sampler.config.max_new_tokens, n)
  outputs, warm = {}, {}
  for name, fn in runs.items():                               # warm-up (compiles)
    outputs[name.split("@")[0]], stats = fn()
    warm[name] = stats["wall_s"]
  hf = sorted((w, n) for n, w in warm.items() if n.startswith("transformers@"))
  for _, name in hf[1:]:                                      # time the fastest thread count
    del runs[name]
  best = {}
  for _ in range(repeats):
    for name, fn in runs.items():                             # alternate: same machine load
      name = name.split("@")[0]
      out, stats = fn()
      if name not in best or stats["wall_s"] < best[name]["wall_s"]:
        best[name], outputs[name] = stats, out

  eb = outputs["engine"]
  labels = np.asarray(eb.traj.labels)
  policy_tokens = int((labels == int(Source.POLICY)).sum())
  n_turns = sum(len(r.turns) for r in eb.rows)
  result = {"bench": "rollout", "preset": args.preset, "params": setup.cfg.num_params(),
            "dtype": setup.dtype, "backend": jax.default_backend(),
            "device": jax.devices()[0].device_kind, "corpus": setup.env.source,
            "documents": setup.env.num_documents, "doc_tokens": args.doc_tokens,
            "top_k": args.top_k, "turns": turns, "batch": batch, "repeats": repeats,
            "searches_per_row": round(sum(r.num_searches for r in eb.rows) / len(eb.rows), 2),
            "policy_tokens": policy_tokens,
            "policy_tokens_per_turn": round(policy_tokens / max(n_turns, 1), 1),
            "retrieved_tokens_per_search": round(
                int((labels == int(Source.RETRIEVED)).sum())
                / max(sum(r.num_searches for r in eb.rows), 1), 1),
            "trajectory_tokens": int(np.asarray(eb.traj.lengths).sum()),
            "cache_length": sampler.config.max_cache_length, "attend_step": args.attend_step,
            "cpu_attention_kernel": sampler.cpu_kernel,
            "fused_projections": sampler.fused, "attention_impl": setup.cfg.attention_impl,
            "decode_attention": sampler.config.decode_attention,
            "decode_chunk": args.decode_chunk,
            "retrieval_ms": args.retrieval_ms, "retrieval_query_ms": args.retrieval_query_ms,
            "load_avg_1min": round(os.getloadavg()[0], 2)}
  loops = {}
  for name, stats in best.items():
    wall = stats["wall_s"]
    loops[name] = {"trajectories_per_s": round(batch / wall, 3),
                   "policy_tokens_per_s": round(policy_tokens / wall, 1),
                   "wall_s": round(wall, 3),
                   "time_s": {k: round(v, 3) for k, v in stats["time_s"].items()},
                   "tokens_processed": stats["tokens_processed"]}
    if "tokens_fed" in stats:
      loops[name]["tokens_fed"] = stats["tokens_fed"]
    if stats.get("retrieval_call_s"):       # the share of retrieval time hidden behind decoding
      loops[name]["retrieval_call_s"] = round(stats["retrieval_call_s"], 3)
      loops[name]["searches_behind_decoding"] = stats["searches_behind_decoding"]
      loops[name]["retrieval_overlap"] = round(
          1 - stats["time_s"]["retrieval"] / stats["retrieval_call_s"], 3)
    if "host_in_generate_s" in stats:
      loops[name]["host_in_generate_s"] = round(stats["host_in_generate_s"], 3)
      loops[name]["torch_threads"] = stats["torch_threads"]
  result["loops"] = loops
  result["ratio_engine_vs_reprefill"] = round(
      best["reprefill"]["wall_s"] / best["engine"]["wall_s"], 2)
  if "transformers" in best:
    result["ratio_engine_vs_transformers"] = round(
        best["transformers"]["wall_s"] / best["engine"]["wall_s"], 2)
  hf = (outputs["transformers"], setup.hf_model()[1]) if "transformers" in best else (None, None)
  result.update(compare(eb, outputs["reprefill"], *hf))
  if "whole_turns" in best:
    result["ratio_engine_vs_whole_turns"] = round(
        best["whole_turns"]["wall_s"] / best["engine"]["wall_s"], 2)
    same = compare(eb, outputs["whole_turns"], None, None)
    result["rows_identical"]["whole_turns"] = same["rows_identical"]["reprefill"]
    result["identical"] = result["identical"] and same["identical"]
  if "engine_xla_attention" in best:
    result["ratio_engine_vs_xla_attention"] = round(
        best["engine_xla_attention"]["wall_s"] / best["engine"]["wall_s"], 2)
    same = compare(eb, outputs["engine_xla_attention"], None, None)
    result["rows_identical"]["engine_xla_attention"] = same["rows_identical"]["reprefill"]
    result["max_logprob_diff_xla_attention"] = same["max_logprob_diff_reprefill"]
    result["identical"] = result["identical"] and same["identical"]
  return result


def int_list(text: str) -> list[int]:
  return [int(x) for x in text.split(",") if x]


def parser(description: str) -> argparse.ArgumentParser:
  """The flags of the rollout benchmarks (this one and bench.rollout_memory)."""
  ap = argparse.ArgumentParser(description=description)
  ap.add_argument("--preset", default="small",
                  help=f"{sorted(SHAPES)} or a ragjax.models.presets name (random weights)")
  ap.add_argument("--turns", type=int_list, default=[4],
                  help="searches per row; a comma list sweeps")
  ap.add_argument("--batch", type=int_list, default=[8], help="rows; a comma list sweeps")
  ap.add_argument("--doc-tokens", type=int, default=100, help="tokens per retrieved document")
  ap.add_argument("--top-k", type=int, default=3)
  ap.add_argument("--think-tokens", type=int, default=48,
                  help="most think words per turn (the fewest is a third of it)")
  ap.add_argument("--query-words", type=int, default=4)
  ap.add_argument("--corpus", choices=("shared", "world"), default=None,
                  help="default: shared if ../shared/data is present, else world")
  ap.add_argument("--vocab", type=int, default=8192, help="tokenizer size (trained in the run)")
  ap.add_argument("--dtype", default=None, help="float32 | bfloat16 (default: bf16 on GPU)")
  ap.add_argument("--repeats", type=int, default=2)
  ap.add_argument("--attend-step", type=int, default=0,
                  help="the sampler attends to cache windows in multiples of this (0: its "
                       "default, powers of two, then the whole cache)")
  ap.add_argument("--reprefill-rows", type=int, default=0,
                  help="re-prefill at most this many rows per call (0: all live rows; a GPU "
                       "batch of 256 full histories needs chunks to fit in memory)")
  ap.add_argument("--skip-hf", action="store_true")
  ap.add_argument("--torch-threads", type=int_list, default=[1, os.cpu_count() or 1],
                  help="the transformers loop warms up at each thread count and is timed at the "
                       "fastest (on a shared CPU one thread is often faster)")
  ap.add_argument("--decode-chunk", type=int, default=0,
                  help="the engine's EngineConfig.decode_chunk (0: whole turns)")
  ap.add_argument("--retrieval-ms", type=float, default=0.0,
                  help="added latency per retrieval call (a remote retrieval server)")
  ap.add_argument("--retrieval-query-ms", type=float, default=0.0,
                  help="added latency per query of a retrieval call (its search time)")
  ap.add_argument("--xla-attention", action="store_true",
                  help="add the engine with XLA's attention instead of the CPU kernel as a loop")
  ap.add_argument("--fused-projections", choices=("auto", "on", "off"), default="auto",
                  help="the sampler's fused qkv / gate-up weights (auto: on for accelerators)")
  ap.add_argument("--decode-attention", default="xla", choices=("xla", "pallas"),
                  help="a decode step's attention (SamplerConfig.decode_attention)")
  ap.add_argument("--attention-impl", default="", choices=("", "xla", "cudnn"),
                  help="prefill / extend attention through jax.nn.dot_product_attention with "
                       "this implementation (model.attention_impl; '': ragjax's own)")
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--workdir", default=None, help="where the corpus, index and export go")
  return ap


def main(argv=None):
  args = parser(__doc__.splitlines()[0]).parse_args(argv)
  args.batch_list = args.batch
  workdir = args.workdir or tempfile.mkdtemp(prefix="ragjax_bench_rollout_")
  setup = Setup(args, workdir)
  results = []
  for turns in args.turns:
    for batch in args.batch:
      result = run_setting(setup, turns, batch, args.repeats, args.skip_hf)
      print(json.dumps(result), flush=True)
      results.append(result)
  return results


if __name__ == "__main__":
  main()
