"""Model services from config: the `ChatModel` a `chat_service` section names (configs/common.py).

One schema serves every model a recipe calls during training: the training judge (`judge`:
ReZero's correctness, R3-RAG's relevance and Acc_model) and R3-RAG's cold-start `teacher`.
`kind` picks the backend: "url" (an OpenAI-compatible server), "checkpoint" (an HF directory
in this process), "base" (the policy as loaded, frozen, sharing its weights), "gold" (a rule
judge reading the data's gold passages), "world" (the synthetic world's scripted teacher).
"""

from __future__ import annotations

import os
from typing import Sequence

JUDGE_KINDS = ("", "url", "checkpoint", "base", "gold")
TEACHER_KINDS = ("url", "checkpoint", "world")


def check_chat(c, section: str, kinds: Sequence[str] = JUDGE_KINDS) -> str:
  """The section's kind, checked (with the fields that kind needs) before any work."""
  sec = c.get(section, None)
  if sec is None:
    if "" in kinds:
      return ""
    raise ValueError(f"the config has no {section!r} section (a chat_service)")
  kind = sec.get("kind", None)
  if kind not in kinds:
    raise ValueError(f"{section}.kind={kind!r}: use one of {tuple(kinds)}")
  if kind == "url" and not sec.url:
    raise ValueError(f"{section}.kind='url' needs {section}.url (an OpenAI-compatible base URL)")
  if kind == "url" and not sec.model:
    raise ValueError(f"{section}.kind='url' needs {section}.model (the served model's name)")
  if kind == "checkpoint" and not sec.checkpoint:
    raise ValueError(f"{section}.kind='checkpoint' needs {section}.checkpoint (an HF directory)")
  return kind


def make_chat(c, section: str, *, policy=None, setup=None, mesh=None):
  """The `ChatModel` of config section `section` (None for kind "").  `policy` is the
  (cfg, params, tokenizer) of kind "base"; `setup` (`components.Setup`) holds the records and
  world the "gold" judge and the "world" teacher read."""
  kind = check_chat(c, section, JUDGE_KINDS + TEACHER_KINDS)
  sec = c[section]
  if kind == "":
    return None
  if kind == "url":
    from ragjax.services.http_client import OpenAIChatClient
    return OpenAIChatClient(sec.url, sec.model, api_key_env=sec.api_key_env or None,
                            max_concurrency=sec.max_concurrency, max_retries=sec.max_retries,
                            timeout=sec.timeout)
  sizes = dict(max_batch=sec.max_batch, max_prompt_tokens=sec.max_prompt_tokens,
               max_new_tokens=sec.max_new_tokens, seed=c.seed)
  if kind in ("checkpoint", "base"):
    from ragjax.services.local import LocalChatModel
    if kind == "checkpoint":
      return LocalChatModel.from_checkpoint(sec.checkpoint, name=sec.model, **sizes)
    if policy is None:
      raise ValueError(f"{section}.kind='base' is the policy in this process, which this stage "
                       f"does not load")
    cfg, params, tok = policy
    return LocalChatModel(cfg, params, tok, name=sec.model, mesh=mesh, **sizes)
  if setup is None:
    raise ValueError(f"{section}.kind={kind!r} reads the data: needs the recipe's setup")
  records = [r for split in setup.splits.values() for r in split]
  if kind == "world":
    from ragjax.data.world_teacher import WorldTeacher
    if setup.world is None:
      raise ValueError(f"{section}.kind='world' is the synthetic world's teacher: needs "
                       f"data.source='world'")
    return WorldTeacher(records, **sec.world.to_dict())
  from ragjax.services.gold_judge import GoldJudge
  return GoldJudge(records, gold_passages(c, setup, records))


def gold_passages(c, setup, records) -> dict:
  """{id: contents} of the records' supporting passages: the world's, or the index's store."""
  if setup.world is not None:
    return {p["id"]: p["contents"] for p in setup.world.passages}
  if not c.retriever.index:
    raise ValueError("judge.kind='gold' reads the gold passages from the world or from "
                     "retriever.index's passage store")
  from ragjax.retrieval.store import PassageStore
  store = PassageStore(c.retriever.index)
  want = {i for r in records for i in r.get("supporting_ids") or ()}
  rows = [k for k, i in enumerate(store.ids()) if i in want]
  return dict(zip(store.ids(rows), store.contents(rows)))


def make_services(c, cfg, params, tok, mesh=None, setup=None) -> dict:
  """The model services rewards call (`ctx.services`): {"judge": ChatModel} from the config's
  `judge` section ({} for none).  "base" is the policy as loaded (before training; with LoRA
  exactly the frozen base), in this process and sharing its weights."""
  judge = make_chat(c, "judge", policy=(cfg, params, tok), setup=setup, mesh=mesh)
  if judge is not None and c.rl.rewards.get("rezero_correctness", 0.0) and setup is not None:
    from ragjax.rl.rewards.rezero import check_judge_room
    kwargs = dict(c.rl.get("reward_kwargs", {}).get("rezero_correctness", {}))
    check_judge_room(judge, setup.splits.get("train", []), int(c.sampler.max_new_tokens),
                     kwargs.get("judge_input", "answer"))
  return {} if judge is None else {"judge": judge}



def eval_chat(c):
  """The evaluation judge behind `acc` (`eval.judge`): an OpenAI-compatible endpoint (`url` +
  `model`) or an HF checkpoint run in process (`checkpoint`); None when neither is set.
  Returns (ChatModel, a name for tables)."""
  j = c.eval.judge
  if j.url:
    from ragjax.services import OpenAIChatClient
    if not j.model:
      raise ValueError("eval.judge.url needs eval.judge.model (the served model's name)")
    return (OpenAIChatClient(j.url, j.model, api_key_env=j.api_key_env or None,
                             cache_path=j.cache or None), f"{j.model} at {j.url}")
  if j.checkpoint:
    from ragjax.services.local import LocalChatModel
    return (LocalChatModel.from_checkpoint(j.checkpoint, max_prompt_tokens=j.max_prompt_tokens),
            f"{os.path.basename(os.path.normpath(j.checkpoint))} (in process)")
  return None
