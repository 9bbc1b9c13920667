"""A config's derived plan beside the paper's: what `--dry_run` prints above the memory table.

    python -m ragjax.train --config=configs/search_r1.py:qwen2.5-3b --dry_run

`derived(c)` computes, from the config alone, the quantities a reproduction turns on:
sequences and optimizer updates per RL step and in total, the LR schedule, token budgets,
retrieval depth, sampling, loss aggregation, the critic's whitening and clip, which policy the
run ends with, and the retriever (read from the manifest of the index the run will open:
`ragjax.planning.retriever`).  A config module may add method-specific ones with `plan(c) -> dict` (UR²'s
stages, evaluation protocols).  The paper's values live in `configs/paper_plans/<config>.json`:

    {"<config argument>": {"<quantity>": {"paper": 10, "from": "text" | "code" | "both",
                                          "source": "§ / code file and line",
                                          "deviation": "why ragjax differs; the field"}}}

`from` says where the value was read: the paper's text, the authors' code (scripts, defaults
of the framework they ran), or both; the plan marks an agreeing row "= paper" only where the
text says it ("= paper (code)", "= paper (text, code)").  `deviation` is there only where
ragjax deliberately differs (a reading of the authors' code
over the text, a setting this machine forces); every other paper value must equal the derived
one (`tests/test_paper_plans.py`).  The method's ledger (`docs/methods/<method>.md`) says why.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
from typing import Any, Mapping, Optional

from ragjax.planning.retriever import KEYS as RETRIEVER_KEYS, retriever_rows
from ragjax.rl.optim import learning_rate_schedule
from ragjax.rl.run_config import parse_run_config, updates_per_step, value_head_std

# quantity -> how the plan names it (the order is the table's)
LABELS = {
    "prompts_per_step": "prompts per RL step",
    "group_size": "samples per prompt (group size)",
    "sequences_per_step": "sequences per RL step",
    "mini_batch_size": "sequences per optimizer update",
    "updates_per_step": "optimizer updates per RL step",
    "rl_steps": "RL steps",
    "updates_total": "optimizer updates in total",
    "lr": "learning rate",
    "lr_schedule": "LR schedule",
    "lr_clock": "LR schedule steps once per",
    "lr_warmup": "LR warmup (schedule steps)",
    "lr_first_step": "learning rate of the first schedule step",
    "kl_coef": "KL coefficient",
    "kl_estimator": "KL estimator",
    "clip_low": "clip (low)",
    "clip_high": "clip (high)",
    "entropy_coef": "entropy coefficient",
    "temperature": "sampling temperature",
    "top_p": "sampling top-p",
    "loss_agg": "loss aggregation",
    "critic_loss_agg": "critic loss aggregation",
    "adv_whiten": "advantage whitening",
    "adv_whiten_mask": "advantage whitening over",
    "critic_mask": "critic's tokens (value loss, GAE)",
    "value_head_init": "critic's value head init",
    "value_clip": "critic value clip",
    "best_checkpoint": "final policy",
    "retriever_read": "retriever rows read from",
    "retriever_encoder": "retriever encoder",
    "retriever_index": "retriever index (exact / approximate)",
    "retriever_passages": "retriever corpus (passages)",
    "max_turns": "searches per trajectory",
    "tokens_per_turn": "generated tokens per turn",
    "obs_tokens": "tokens per observation",
    "obs_cap": "the observation cap cuts",
    "response_tokens": "tokens after the prompt (0: no cap)",
    "top_k": "documents per search",
    "sft_steps": "SFT steps before RL",
    "critic_lr": "critic learning rate",
    "critic_lr_warmup": "critic LR warmup (schedule steps)",
    "eval_suite": "evaluation suite (--suite)",
    "eval_max_turns": "evaluation: searches per trajectory",
    "eval_tokens_per_turn": "evaluation: generated tokens per turn",
    "eval_obs_tokens": "evaluation: tokens per observation",
    "eval_top_k": "evaluation: documents per search",
    "eval_decoding": "evaluation: decoding",
}


def derived(c) -> dict[str, Any]:
  """The generic derived quantities of an RL config (and the config module's `plan(c)`
  additions when `module` is given to `plan_of`)."""
  run = parse_run_config(c)
  rl, tr, opt = run.rl, run.trainer, run.optim
  per = updates_per_step(rl, tr)
  critic = {} if run.critic_optim is None else {"critic_lr": run.critic_optim.lr,
                                                 "critic_lr_warmup": run.critic_optim.warmup}
  if rl.uses_critic:
    critic.update(critic_loss_agg=loss_agg_name(rl.critic_loss_agg or rl.loss_agg,
                                                rl.loss_agg_rows),
                  adv_whiten=rl.adv_whiten or "none", value_clip=rl.value_clip,
                  critic_mask=MASK_NAMES[rl.critic_mask],
                  adv_whiten_mask=MASK_NAMES[rl.adv_whiten_mask] if rl.adv_whiten else "none",
                  value_head_init=value_head_name(rl.value_head_init, hidden_size(c)))
  return {
      "prompts_per_step": tr.batch_prompts, "group_size": rl.group_size,
      "sequences_per_step": tr.batch_prompts * rl.group_size,
      "mini_batch_size": rl.mini_batch_size or tr.batch_prompts * rl.group_size,
      "updates_per_step": per, "rl_steps": tr.num_steps, "updates_total": tr.num_steps * per,
      "lr": opt.lr, "lr_schedule": opt.schedule, "lr_clock": opt.clock, "lr_warmup": opt.warmup,
      "lr_first_step": float(learning_rate_schedule(opt)(0)),
      "kl_coef": rl.kl_coef, "kl_estimator": rl.kl_estimator, "clip_low": rl.clip_low,
      "clip_high": rl.clip_high, "entropy_coef": rl.entropy_coef,
      "temperature": c.sampler.temperature, "top_p": c.sampler.top_p,
      "loss_agg": loss_agg_name(rl.loss_agg, rl.loss_agg_rows),
      "best_checkpoint": best_checkpoint(tr), "max_turns": c.protocol.get("max_turns"),
      "tokens_per_turn": c.sampler.max_new_tokens,
      "obs_tokens": c.protocol.get("obs_max_tokens"),
      **({"obs_cap": c.protocol.obs_cap} if "obs_cap" in c.protocol else {}),
      "response_tokens": c.rollout.max_response_tokens, "top_k": c.protocol.get("top_k"),
      "sft_steps": c.sft.steps, **critic, **retriever_rows(c),
  }


# rl.critic_mask / rl.adv_whiten_mask as the plan shows them
MASK_NAMES = {"loss": "the loss mask (the policy's tokens)",
              "response": "the response (every token after the prompt, retrieved included)"}


def hidden_size(c) -> int:
  """The policy's hidden size: its checkpoint's config.json, its preset, or the config's shape."""
  from ragjax.models.presets import resolve_decoder_config
  m = c.model
  try:
    return resolve_decoder_config(m.checkpoint or m.preset).hidden_size
  except (OSError, KeyError, ValueError):
    return int(m.get("hidden_size") or 0)


def value_head_name(kind: str, hidden: int) -> str:
  """`rl.value_head_init` as the plan shows it: the weight's distribution (the bias starts 0)."""
  std = value_head_std(kind, hidden)
  return "zeros" if not std else f"{kind}: N(0, {std:.3g}^2)"


def loss_agg_name(mode: str, rows: int) -> str:
  """`rl.loss_agg` as the plan shows it: the micro-batch's rows with token-mean-per-micro-batch."""
  return f"{mode} ({rows} sequences)" if mode == "token-mean-per-micro-batch" else mode


def best_checkpoint(tr) -> str:
  """Which policy the run ends with: the last, or the best checkpoint of the evaluations by
  `trainer.keep_best_metric` (`_macro`: averaged over data sources), on `trainer.eval_split`
  (at most `trainer.eval_per_source` questions of each source)."""
  if not tr.keep_best:
    return "last"
  metric = tr.keep_best_metric
  if metric.endswith("_macro"):
    metric = f"{metric.removesuffix('_macro')} macro-averaged over the data sources"
  sample = f", {tr.eval_per_source} per source" if tr.eval_per_source else ""
  return f"best {metric} (evaluated every {tr.eval_every} steps{sample})"


def eval_plan(c, suite: str) -> dict[str, Any]:
  """The evaluation protocol `python -m ragjax.evaluate --suite <suite>` runs with this config:
  the suite's pinned protocol over the config's own, `eval.top_k` over both (for a config
  module's `plan(c)`)."""
  s = c.eval.suites[suite]
  proto = {**c.protocol.to_dict(), **dict(s.get("protocol", {}) or {})}
  sampler = {**c.sampler.to_dict(),          # a None sampler field is left to the config
             **{k: v for k, v in dict(s.get("sampler", {}) or {}).items() if v is not None}}
  return {"eval_suite": suite, "eval_max_turns": proto.get("max_turns"),
          "eval_tokens_per_turn": sampler.get("max_new_tokens"),
          "eval_obs_tokens": proto.get("obs_max_tokens"), "eval_top_k": c.eval.top_k or proto.get("top_k"),
          "eval_decoding": "greedy" if s.get("greedy", True) else
                           f"T={s.get('temperature')}, top_p={s.get('top_p')}"}


INDEX_KEYS = RETRIEVER_KEYS[1:]        # encoder, index kind, passages: read from the index
ORIGINS = ("text", "code", "both")
ORIGIN_NOTE = {"text": "", "code": " (code)", "both": " (text, code)"}


@dataclasses.dataclass(frozen=True)
class Row:
  key: str
  ours: Any
  paper: Any = None
  source: str = ""
  deviation: str = ""
  origin: str = ""            # the paper plan's "from": text | code | both


  @property
  def known(self) -> bool:
    return self.paper is not None

  @property
  def agrees(self) -> bool:
    return same(self.ours, self.paper)

  @property
  def verdict(self) -> str:
    if not self.known:
      return ""
    if self.agrees:
      return "= paper" + ORIGIN_NOTE.get(self.origin, "")
    return f"deviates: {self.deviation}" if self.deviation else "DIFFERS (undocumented)"


def same(a, b) -> bool:
  if isinstance(a, bool) or isinstance(b, bool) or isinstance(a, str) or isinstance(b, str):
    return a == b
  if isinstance(a, (int, float)) and isinstance(b, (int, float)):
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))
  if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
  return a == b


def config_module(path: str):
  """The config file as a module (its `plan(c)` hook, if any)."""
  spec = importlib.util.spec_from_file_location(
      "ragjax_plan_" + os.path.splitext(os.path.basename(path))[0], path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def paper_values(config_file: str, arg: str) -> tuple[Optional[str], Mapping[str, Mapping]]:
  """(json path, {quantity: {"paper", "source", "deviation"}}) for `config_file:arg`; an empty
  mapping when the config has no plan file or the file has no entry for the argument."""
  name = os.path.splitext(os.path.basename(config_file))[0]
  path = os.path.join(os.path.dirname(os.path.abspath(config_file)), "paper_plans",
                      f"{name}.json")
  if not os.path.exists(path):
    return None, {}
  with open(path) as f:
    table = json.load(f)
  return path, table.get(arg, {})


def plan_rows(c, config_file: Optional[str] = None, arg: str = "") -> list[Row]:
  """Every derived quantity (generic, then the config module's `plan(c)`), with the paper's
  value where `configs/paper_plans/<config>.json` has one; paper-only quantities that nothing
  derives are listed last (ours None)."""
  ours = derived(c)
  paper: Mapping[str, Mapping] = {}
  if config_file:
    module = config_module(config_file)
    if hasattr(module, "plan"):
      ours.update(module.plan(c))
    paper = paper_values(config_file, arg)[1]
  rows = []
  for key, value in ours.items():
    p = paper.get(key, {})
    deviation = p.get("deviation", "")
    if key in INDEX_KEYS and "paper" in p and not deviation and not same(value, p["paper"]):
      # the index the user gave, not a config's choice: a deviation the plan names
      deviation = (f"the index this run searches is not the paper's ({ours['retriever_read']}); "
                   f"--config.retriever.index / --config.retriever.url choose another")
    rows.append(Row(key, value, p.get("paper"), p.get("source", ""), deviation,
                    p.get("from", "")))
  for key in paper:
    if key not in ours:
      p = paper[key]
      rows.append(Row(key, None, p.get("paper"), p.get("source", ""), p.get("deviation", ""),
                      p.get("from", "")))
  return rows


def show(value) -> str:
  if value is None:
    return "-"
  if isinstance(value, float):
    return f"{value:g}"
  return str(value)


def plan_table(rows, title: str) -> str:
  out = [title, "| quantity | ragjax | paper | | source |", "|---|---|---|---|---|"]
  for r in rows:
    out.append(f"| {LABELS.get(r.key, r.key.replace('_', ' '))} | {show(r.ours)} | "
               f"{show(r.paper) if r.known else ''} | {r.verdict} | {r.source} |")
  flagged = [r for r in rows if r.known and not r.agrees]
  undocumented = [r for r in flagged if not r.deviation]
  out.append(f"{sum(r.known for r in rows)} quantities with a paper value: "
             f"{len(flagged) - len(undocumented)} deviate (documented), "
             f"{len(undocumented)} differ without a reason ('= paper': the paper's text says "
             f"it; '(code)': only the authors' code does; '(text, code)': both)")
  return "\n".join(out)


def split_config_arg(spec: str) -> tuple[str, str]:
  """`configs/x.py:arg` -> ("configs/x.py", "arg")."""
  path, _, arg = spec.partition(":")
  return path, arg.lower()
