"""The multi-turn search loop as a PyTorch user writes it with transformers: `generate` per turn
on the full re-tokenised history, batched (left padding), greedy, with stop strings.

    texts = [prompt(q) for q in questions]
    for turn in range(max_turns + 1):
      batch = tokenizer(texts of live rows, padding=True)            # whole history, every turn
      out = model.generate(**batch, stop_strings=["</search>", "</answer>"], ...)
      text = decode(new tokens); cut after the first action; search; append documents

(what ReZero's TRL loop and Tunix's agentic learner do, and Search-R1's verl loop without
prefix caching).  The protocol object supplies the prompt text, the parser and the
observation text, so the three loops of `ragjax.bench.rollout` run the same protocol.
`ForwardTimer` books the model's forward calls inside `generate` as prefill (the first call,
several tokens per row) or decode (one token per row) with the positions they computed.
"""

from __future__ import annotations

import collections
import time
from typing import Sequence

from ragjax.rollout.protocols.base import Kind, as_prompt_input


class ForwardTimer:
  """Forward hooks on a torch model: seconds and positions (rows x tokens) per kind."""

  def __init__(self, model):
    self.seconds = collections.Counter({"prefill": 0.0, "decode": 0.0})
    self.positions = collections.Counter({"prefill": 0, "decode": 0})
    self._t0, self._kind = 0.0, "decode"
    model.register_forward_pre_hook(self._pre, with_kwargs=True)
    model.register_forward_hook(self._post, with_kwargs=True)

  def reset(self):
    for k in self.seconds:
      self.seconds[k], self.positions[k] = 0.0, 0

  def _pre(self, module, args, kwargs):
    ids = kwargs.get("input_ids", args[0] if args else None)
    rows, width = ids.shape
    self._kind = "prefill" if width > 1 else "decode"
    self.positions[self._kind] += rows * width
    self._t0 = time.perf_counter()

  def _post(self, module, args, kwargs, output):
    self.seconds[self._kind] += time.perf_counter() - self._t0


def hf_rollout(model, tokenizer, protocol, retriever, prompts: Sequence, max_new_tokens: int,
               timings: collections.Counter) -> list[str]:
  """Each prompt's whole trajectory text (prompt, turns, documents).  `timings` gets
  `generate_s` and `retrieval_s` added; the rest of the wall time is host work."""
  import torch
  tokenizer.padding_side = "left"
  texts = [protocol.plain_prompt(as_prompt_input(p)) for p in prompts]
  live = list(range(len(texts)))
  turns = protocol.max_turns + (1 if protocol.final_turn else 0)
  for t in range(turns):
    if not live:
      break
    final = t == turns - 1
    batch = tokenizer([texts[i] for i in live], return_tensors="pt", padding=True)
    t0 = time.perf_counter()
    with torch.no_grad():
      out = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False,
                           stop_strings=list(protocol.stop_sequences), tokenizer=tokenizer,
                           pad_token_id=tokenizer.pad_token_id,
                           eos_token_id=tokenizer.eos_token_id)
    timings["generate_s"] += time.perf_counter() - t0
    new = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
    searches, still = [], []
    for i, text in zip(live, new):
      action = protocol.parse(text, final=final)
      texts[i] += text if action.keep is None else text[:action.keep]
      if action.kind == Kind.SEARCH:
        searches.append((i, action.query))
      elif action.kind == Kind.INVALID:
        texts[i] += "".join(s.text for s in protocol.invalid_observation())
        still.append(i)
    if searches:
      t0 = time.perf_counter()
      hits = retriever.search([q for _, q in searches], protocol.top_k)
      timings["retrieval_s"] += time.perf_counter() - t0
      for (i, query), h in zip(searches, hits):
        texts[i] += "".join(s.text for s in protocol.observation(query, h))
        still.append(i)
    live = sorted(still)
  return texts
