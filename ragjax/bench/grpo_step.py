"""The whole GRPO step at a config's shape: rollout, log-prob and update time, tokens/s, and the
update's fraction of the matmul peak measured in the same run (the next speed-up's target).

    python -m ragjax.bench.grpo_step                      # configs/world.py and search_r1.py:tiny
    python -m ragjax.bench.grpo_step --config configs/world.py --steps 6
    python -m ragjax.bench.grpo_step --config configs/world.py \\
        --set model.checkpoint=runs/world/cold_start_policy     # a trained policy's rollouts

Everything is built from the config the way `python -m ragjax.train` builds it
(`ragjax.wiring.components`: data and retriever, mesh, policy, `make_trainer` with the
engine from `ragjax.rollout.factory`); then `--steps` RL steps run through
`Trainer.train_step` (no evaluation, no checkpoint).  A step whose batch shape (rows x padded
width) is new compiles the scoring and update programs; the JSON line reports the median of
the steps whose shape was already seen (of all but the first when none was).  The policy has
the config's random initialisation unless `model.checkpoint` is set, so its rollouts are those of an untrained policy (turns run to the
per-turn budget); the update's shapes are the config's either way.

Update FLOPs follow `ragjax.bench.train_step.model_flops_per_token` (6 x matmul params + the
attention term, PaLM convention) over the padded batch the update runs on (`positions`), with
the unembedding counted only at trained positions when `rl.gather` is on, times
`rl.ppo_epochs`.  A LoRA update counts the work it needs (`lora_update_flops`): with the
merged forward every adapted kernel still gets its weight gradient (6 x, as full training);
with the adapter-aware forward a layer costs 4 x its matmul params (forward and input
gradient), a layer below `model.lora.layers` 2 x (forward only), the frozen unembedding 4 x,
plus the adapters' own products.  The reference is a square matmul timed in the same run (float32 1024 on CPU,
bfloat16 8192 on accelerators).  `--retriever bm25` swaps the config's dense index for BM25
(skips the MiniLM encoding of the corpus; the retrieval share of the rollout changes).

`--hf-reference N` (a config with `model.checkpoint`: an HF directory or a GGUF file) also
times the rollout of N training questions both ways, greedy, on the same weights and prompts
(the config's chat rendering), each after a warm-up run: ragjax's engine (the trainer's greedy
engine) and the transformers loop of `ragjax.bench.hf_loop` (`generate` per turn on the
re-tokenised history, with the config's protocol, budget and retriever):

    python -m ragjax.bench.grpo_step --config configs/smollm2.py --steps 1 --hf-reference 16 \\
        --hf-reference-reps 2      # the two loops twice in turn: medians under a changing load

`--baseline FIELD=VALUE` (repeatable) measures each config twice in one run, first with these
overrides on top of `--set` (e.g. the update as it was: `model.lora.forward=merged`,
`model.lora.layers=0`), then without, from the same seed (so the first step's rollouts are the
same rows), and prints a third line comparing the update's seconds per trained row:

    python -m ragjax.bench.grpo_step --config configs/smollm2.py --steps 3 \\
        --baseline model.lora.forward=merged --baseline model.lora.layers=0
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile

import jax
import jax.numpy as jnp

from ragjax.bench.train_step import measured_matmul_peak, model_flops_per_token
from ragjax.wiring import components as parts
from ragjax.wiring.config_files import apply_overrides, load_config

DEFAULT_CONFIGS = ("configs/world.py", "configs/search_r1.py:tiny")


def lora_update_flops(cfg, lora, width: int, positions: int, unembedded: int) -> float:
  """FLOPs of a LoRA policy update over `positions` padded positions of `width`, the
  unembedding at `unembedded` of them (module docstring)."""
  e, m, h, kvh, d, v = (cfg.hidden_size, cfg.intermediate_size, cfg.num_heads,
                        cfg.num_kv_heads, cfg.head_dim, cfg.vocab_size)
  layer = e * (h + 2 * kvh) * d + h * d * e + 3 * e * m    # matmul params of one layer
  attn = 4.0 * h * d * width                               # the attention's forward per token
  dims = {"q_proj": (e, h * d), "k_proj": (e, kvh * d), "v_proj": (e, kvh * d),
          "o_proj": (h * d, e), "gate_proj": (e, m), "up_proj": (e, m), "down_proj": (m, e)}
  adapters = sum(6.0 * lora.rank * sum(dims[t]) for t in lora.targets)
  top = lora.layers or cfg.num_layers
  if lora.forward == "merged":
    per_token = cfg.num_layers * (6.0 * layer + 3 * attn) + top * adapters
  else:
    per_token = (top * (4.0 * layer + 3 * attn + adapters)
                 + (cfg.num_layers - top) * (2.0 * layer + attn))
  return per_token * positions + 4.0 * v * e * unembedded


def update_flops(cfg, m: dict, run, lora=None) -> float:
  """Model FLOPs of one step's updates (see the module docstring)."""
  rows = max(int(m["trajectories"]), 1)
  width = int(m["positions"]) // rows
  unembedded = m["trained_tokens"] if run.rl.gather else m["positions"]
  if lora is not None and lora.enabled and not run.rl.uses_critic:
    return lora_update_flops(cfg, lora, width, m["positions"], unembedded) * run.rl.ppo_epochs
  flops = model_flops_per_token(cfg, width) * m["positions"]
  if run.rl.gather:                         # the unembedding runs at trained positions only
    flops -= 6.0 * cfg.vocab_size * cfg.hidden_size * (m["positions"] - m["trained_tokens"])
  if run.rl.uses_critic:                    # the critic's body runs forward and backward too
    flops += (model_flops_per_token(cfg, width)
              - 6.0 * cfg.vocab_size * cfg.hidden_size) * m["positions"]
  return flops * run.rl.ppo_epochs


def bench_config(spec: str, args, workdir: str, peak: float, extra=()) -> dict:
  from ragjax.errors import exit_on_user_error
  with exit_on_user_error("ragjax.bench.grpo_step"):     # a bad --set / --baseline: one line
    c = apply_overrides(load_config(spec), list(args.set) + list(extra))
  c.workdir, c.progress = workdir, False
  c.trainer.tensorboard = False
  if args.retriever == "bm25":
    c.retriever.backend = "bm25"
  run = parts.validate(c)
  setup = parts.load_data(c, workdir)
  mesh = parts.make_mesh(c)
  cfg, params, tok = parts.load_policy(c, setup.tokenizer, mesh)
  trainer = parts.make_trainer(c, run, cfg, params, tok, setup, mesh)
  reference = (hf_reference(c, trainer.eval_engine, setup, args.hf_reference,
                            args.hf_reference_reps) if args.hf_reference else {})
  steps = [trainer.train_step(s) for s in range(1, args.steps + 1)]
  trainer.ckpt.close()
  # A step whose padded width is new compiles the scoring and update programs for it: time
  # the steps at widths already compiled (all but the first when every width is new).
  seen, warm = set(), []
  for m in steps:
    width = (m["trajectories"], m["positions"])
    warm.append(width in seen)
    seen.add(width)
  timed = [m for m, w in zip(steps, warm) if w] or steps[1:] or steps
  med = lambda key: statistics.median(float(m[key]) for m in timed)
  step_s, roll_s, lp_s, upd_s = (med(k) for k in ("time/step_s", "time/rollout_s",
                                                   "time/logprob_s", "time/update_s"))
  policy_tokens = med("response_length") * med("trajectories")
  lora = trainer.adapter.lora if trainer.adapter is not None else None
  flops = statistics.median(update_flops(cfg, m, run, lora) for m in timed)
  return {
      "bench": "grpo_step", "config": spec, "overrides": list(args.set) + list(extra),
      "params": cfg.num_params(), "layers": cfg.num_layers, "hidden": cfg.hidden_size,
      "vocab": cfg.vocab_size, "dtype": cfg.dtype, "backend": jax.default_backend(),
      "devices": jax.device_count(), "retriever": c.retriever.backend,
      "prompts": run.trainer.batch_prompts, "group_size": run.rl.group_size,
      "trajectories": int(med("trajectories")),
      "padded_width": int(med("positions") // max(med("trajectories"), 1)),
      "tokens": int(med("tokens")), "trained_tokens": int(med("trained_tokens")),
      "gather": run.rl.gather, "sampler_logprobs": run.rl.use_sampler_logprobs,
      "kl_coef": run.rl.kl_coef, "steps": len(steps), "steps_timed": len(timed),
      "first_step_s": round(float(steps[0]["time/step_s"]), 3),
      "step_s": round(step_s, 3), "rollout_s": round(roll_s, 3),
      "retrieval_s": round(med("time/retrieval_s"), 3), "logprob_s": round(lp_s, 3),
      "update_s": round(upd_s, 3), "other_s": round(step_s - roll_s - lp_s - upd_s, 3),
      "update_s_per_row": round(upd_s / max(med("trajectories"), 1), 4),
      "tokens_per_s": round(med("tokens") / step_s, 1),
      "rollout_policy_tokens_per_s": round(policy_tokens / roll_s, 1),
      "update_positions_per_s": round(med("positions") * run.rl.ppo_epochs / upd_s, 1),
      "update_model_tflops_per_s": round(flops / upd_s / 1e12, 5),
      "measured_matmul_peak_tflops": round(peak / 1e12, 4),
      "update_fraction_of_peak": round(flops / upd_s / peak, 4),
      "load_avg_1min": round(os.getloadavg()[0], 2), **reference}


class ChatRendered:
  """The protocol with `plain_prompt` replaced by the engine's own prompt text (the chat
  template when the engine uses one), so the transformers loop prompts exactly as ragjax."""

  def __init__(self, protocol, renderer):
    self._protocol, self._renderer = protocol, renderer

  def plain_prompt(self, inp):
    return self._renderer.prompt_text(inp)

  def __getattr__(self, name):
    return getattr(self._protocol, name)


def hf_reference(c, engine, setup, n: int, reps: int = 1) -> dict:
  """Greedy rollouts of `n` training questions by ragjax's engine and by the transformers loop
  on the same weights, each after a warm-up run, then `reps` times in turn (the medians, so a
  load that changes during the run weighs on both): seconds, policy tokens, tokens/s."""
  import collections
  import time
  import torch
  from transformers import AutoModelForCausalLM
  from ragjax.bench.hf_loop import hf_rollout
  from ragjax.models.gguf_io import is_gguf
  from ragjax.models.hf_io import load_tokenizer
  from ragjax.rollout.labels import Source
  if not c.model.checkpoint:
    raise ValueError("--hf-reference needs model.checkpoint (an HF directory or a GGUF file)")
  records = setup.splits["train"][:n]
  engine.run(records)                                       # compiles
  path = c.model.checkpoint
  kw = dict(dtype=torch.float32, local_files_only=True)
  if is_gguf(path):
    folder, name = os.path.split(os.path.abspath(path))
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, **kw).eval()
  else:
    model = AutoModelForCausalLM.from_pretrained(path, **kw).eval()
  tok = load_tokenizer(path)
  if tok.pad_token_id is None:
    tok.pad_token = tok.eos_token
  protocol = ChatRendered(engine.protocol, engine.renderer)
  budget = c.sampler.max_new_tokens
  hf_rollout(model, tok, protocol, engine.retriever, records[:2], budget,
             collections.Counter())                          # warm-up
  ours, theirs, generate = [], [], []
  for _ in range(max(1, reps)):
    t0 = time.perf_counter()
    batch = engine.run(records)
    ours.append(time.perf_counter() - t0)
    timings = collections.Counter()
    t0 = time.perf_counter()
    texts = hf_rollout(model, tok, protocol, engine.retriever, records, budget, timings)
    theirs.append(time.perf_counter() - t0)
    generate.append(timings["generate_s"])
  ours_s, hf_s = statistics.median(ours), statistics.median(theirs)
  ours_tokens = int((batch.traj.labels == Source.POLICY).sum())
  prompts = [len(tok(protocol.plain_prompt(r["question"]))["input_ids"]) for r in records]
  # the policy's tokens: everything after the prompt less the documents and messages the loop
  # inserted (counted from the text, as the loop keeps no labels)
  hf_tokens = sum(len(tok(t)["input_ids"]) - p for t, p in zip(texts, prompts))
  return {"reference_questions": len(records), "ragjax_greedy_rollout_s": round(ours_s, 2),
          "ragjax_policy_tokens": ours_tokens, "transformers_rollout_s": round(hf_s, 2),
          "transformers_generate_s": round(statistics.median(generate), 2),
          "reference_reps": max(1, reps),
          "transformers_tokens_after_prompt": hf_tokens,
          "rollout_speedup_vs_transformers": round(hf_s / ours_s, 2),
          "torch_threads": torch.get_num_threads()}


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--config", action="append", default=None,
                  help=f"FILE.py[:ARG], repeatable (default: {' and '.join(DEFAULT_CONFIGS)})")
  ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                  help="config override, e.g. model.checkpoint=DIR (repeatable)")
  ap.add_argument("--steps", type=int, default=6,
                  help="RL steps per config (steps at a new batch shape compile)")
  ap.add_argument("--retriever", choices=("config", "bm25"), default="config")
  ap.add_argument("--workdir", default=None, help="data and index go here (reused if present)")
  ap.add_argument("--hf-reference", type=int, default=0, metavar="N",
                  help="also time N questions' greedy rollout in ragjax and in a transformers "
                       "generate loop on the same weights (needs model.checkpoint)")
  ap.add_argument("--hf-reference-reps", type=int, default=1, metavar="R",
                  help="with --hf-reference: time the two loops R times in turn (medians)")
  ap.add_argument("--baseline", action="append", default=[], metavar="FIELD=VALUE",
                  help="also measure each config with these overrides first (repeatable) and "
                       "compare the update's seconds per row")
  args = ap.parse_args(argv)
  if args.steps < 1:
    ap.error("--steps must be >= 1")
  from ragjax.errors import exit_on_user_error
  with exit_on_user_error("ragjax.bench.grpo_step"):   # every config and override, before work
    for spec in args.config or DEFAULT_CONFIGS:
      for extra in ((), tuple(args.baseline)) if args.baseline else ((),):
        parts.validate(apply_overrides(load_config(spec), list(args.set) + list(extra)))
  on_accel = jax.default_backend() != "cpu"
  peak = measured_matmul_peak(jnp.bfloat16 if on_accel else jnp.float32,
                              8192 if on_accel else 1024) * jax.device_count()
  root = args.workdir or tempfile.mkdtemp(prefix="ragjax_bench_grpo_")
  results = []
  for spec in args.config or DEFAULT_CONFIGS:
    name = os.path.basename(spec).replace(".py", "").replace(":", "_") + (
        "_bm25" if args.retriever == "bm25" else "")
    base = None
    if args.baseline:
      base = bench_config(spec, args, os.path.join(root, name), peak, args.baseline)
      print(json.dumps(base), flush=True)
      results.append(base)
    result = bench_config(spec, args, os.path.join(root, name), peak)
    print(json.dumps(result), flush=True)
    results.append(result)
    if base is not None:
      compare = {"bench": "grpo_step_update_compare", "config": spec,
                 "baseline": list(args.baseline),
                 "baseline_update_s_per_row": base["update_s_per_row"],
                 "update_s_per_row": result["update_s_per_row"],
                 "ratio": round(result["update_s_per_row"]
                                / max(base["update_s_per_row"], 1e-12), 3),
                 "baseline_update_fraction_of_peak": base["update_fraction_of_peak"],
                 "update_fraction_of_peak": result["update_fraction_of_peak"]}
      print(json.dumps(compare), flush=True)
      results.append(compare)
  return results


if __name__ == "__main__":
  main()
