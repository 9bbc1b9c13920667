"""Model services from config: the `ChatModel` a `chat_service` section names (configs/common.py).

One schema, one reader (`make_chat`) for every model a run calls: the training judge (`judge`:
ReZero's correctness, R3-RAG's relevance and Acc_model), R3-RAG's cold-start `teacher`, the
evaluation judge behind `acc` (`eval.judge`) and UR²'s summarisers
(`ur2.knowledge.summariser`, `ur2.knowledge.math_summariser`).  A section is named by its
dotted path.  `kind` picks the backend: "url" (an OpenAI-compatible server), "checkpoint" (an
HF directory in this process), "base" (the policy as loaded, frozen, sharing its weights),
"gold" (a rule judge reading the data's gold passages), "world" (the synthetic world's
scripted teacher), "script" (R3-RAG steps scripted from real questions' gold answers), "auto" ("url" when `url` is set, else "checkpoint" when `checkpoint` is,
else none: the evaluation judge and the summarisers, so setting `url` alone turns them on),
"" none.  Each role accepts its own kinds (`JUDGE_KINDS`, `TEACHER_KINDS`, `MODEL_KINDS`).
"""

from __future__ import annotations

import os
from typing import Sequence

JUDGE_KINDS = ("", "url", "checkpoint", "base", "gold")
TEACHER_KINDS = ("url", "checkpoint", "world", "script")
MODEL_KINDS = ("", "auto", "url", "checkpoint")    # eval.judge, UR²'s summarisers
ALL_KINDS = tuple(dict.fromkeys(JUDGE_KINDS + TEACHER_KINDS + MODEL_KINDS))
IN_PROCESS_REPLY_TOKENS = 512   # an in-process model's reply cap when max_new_tokens is 0


def section(c, path: str):
  """The config section at dotted `path` (None when any part is missing)."""
  sec = c
  for part in path.split("."):
    sec = sec.get(part, None) if sec is not None else None
  return sec


def check_chat(c, path: str, kinds: Sequence[str] = JUDGE_KINDS) -> str:
  """The section's kind ("auto" resolved to "url", "checkpoint" or ""), checked (with the
  fields that kind needs) before any work."""
  sec = section(c, path)
  if sec is None:
    if "" in kinds:
      return ""
    raise ValueError(f"the config has no {path!r} section (a chat_service)")
  kind = sec.get("kind", None)
  if kind not in kinds:
    raise ValueError(f"{path}.kind={kind!r}: use one of {tuple(kinds)}")
  if kind == "auto":
    kind = "url" if sec.url else "checkpoint" if sec.checkpoint else ""
    where = f"{path}.url"
  else:
    where = f"{path}.kind={kind!r}"
  if kind == "url" and not sec.url:
    raise ValueError(f"{where} needs {path}.url (an OpenAI-compatible base URL)")
  if kind == "url" and not sec.model:
    raise ValueError(f"{where} needs {path}.model (the served model's name)")
  if kind == "checkpoint" and not sec.checkpoint:
    raise ValueError(f"{where} needs {path}.checkpoint (an HF directory)")
  return kind


def make_chat(c, path: str, kinds: Sequence[str] = ALL_KINDS, *, policy=None, setup=None,
              mesh=None):
  """The `ChatModel` of config section `path` (None for kind "", or "auto" with neither url
  nor checkpoint).  `policy` is the (cfg, params, tokenizer) of kind "base"; `setup`
  (`components.Setup`) holds the records and world the "gold" judge and the "world" teacher
  read."""
  kind = check_chat(c, path, kinds)
  sec = section(c, path)
  if kind == "":
    return None
  if kind == "url":
    from ragjax.services.http_client import OpenAIChatClient
    return OpenAIChatClient(sec.url, sec.model, api_key_env=sec.api_key_env or None,
                            max_concurrency=sec.max_concurrency, max_retries=sec.max_retries,
                            timeout=sec.timeout, cache_path=sec.cache or None)
  sizes = dict(max_batch=sec.max_batch, max_prompt_tokens=sec.max_prompt_tokens,
               max_new_tokens=sec.max_new_tokens or IN_PROCESS_REPLY_TOKENS, seed=c.seed)
  if kind in ("checkpoint", "base"):
    from ragjax.services.local import LocalChatModel
    if kind == "checkpoint":
      return LocalChatModel.from_checkpoint(sec.checkpoint, name=sec.model or None, **sizes)
    if policy is None:
      raise ValueError(f"{path}.kind='base' is the policy in this process, which this stage "
                       f"does not load")
    cfg, params, tok = policy
    return LocalChatModel(cfg, params, tok, name=sec.model, mesh=mesh, **sizes)
  if setup is None:
    raise ValueError(f"{path}.kind={kind!r} reads the data: needs the recipe's setup")
  records = [r for split in setup.splits.values() for r in split]
  if kind == "world":
    from ragjax.data.world_teacher import WorldTeacher
    if setup.world is None:
      raise ValueError(f"{path}.kind='world' is the synthetic world's teacher: needs "
                       f"data.source='world'")
    return WorldTeacher(records, **sec.world.to_dict())
  if kind == "script":
    from ragjax.rl.r3_script_teacher import ScriptTeacher
    return ScriptTeacher(records, **(sec.script.to_dict() if "script" in sec else {}))
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
  """The evaluation judge behind `acc` (`eval.judge`, kind "auto" by default: an
  OpenAI-compatible `url` serving `model`, or an HF `checkpoint` run in process); None when
  neither is set.  Returns (ChatModel, a name for tables)."""
  chat = make_chat(c, "eval.judge", MODEL_KINDS)
  if chat is None:
    return None
  j = c.eval.judge
  if check_chat(c, "eval.judge", MODEL_KINDS) == "url":
    return chat, f"{j.model} at {j.url}"
  return chat, f"{os.path.basename(os.path.normpath(j.checkpoint))} (in process)"
