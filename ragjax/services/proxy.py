"""UR²'s summarising retrieval (seeds_ur2_rezero.md §A4.5): top-k passages -> an LLM summary.

    proxy = SummarisingRetriever(open_index("idx"), chat, task="qa", mode="strong")
    proxy.search(["who founded the observatory"], 10)   # [[Hit("summary:p2,p3,...", text, s)]]

A `Retriever` like any other: for each query it retrieves the top k passages from `inner`,
asks the `ChatModel` with the task's UR² prompt (`ur2_summary_{strong,weak}[_math]`, passages
as `Wikipedia Content {i}: ...`), parses the reply (`parse_ur2_summary`) and returns one `Hit`
whose contents are the summary, or exactly `UR2_FALLBACK` when the summariser declined (the
strong prompts' reasoning-type queries; UR²'s rollout then appends its fallback notice and the
reward counts a fallback).  The hit's id names the passages it summarises; its score is the top
passage's.  Summaries are cached in memory by (task, mode, query, previous reasoning, passage
ids), so a repeated query over the same passages costs no model call; `chat` may itself be a
disk-cached client.

Routing: `chat` is one `ChatModel` or a mapping task -> model ("default" for the rest), as UR²
sends math queries to Qwen-3 and the rest to GPT; `search_with_context` takes a task and the
previous reasoning per query (an empty task is the proxy's own), and hands the tasks on to an
`inner` that routes by them (`ragjax.retrieval.routing.RoutedRetriever`: QA -> the abstracts
corpus, the rest -> the full corpus).  Served, a `/retrieve` request carries them as
`contexts` (`tasks`, `prev_reasoning`: what the UR² rollout sends); a request without them is
summarised for `--task` with empty previous reasoning.

Sampling settings default to the template's (the paper's: e.g. 4096 tokens for the strong
prompt); a `LocalChatModel` needs `max_tokens` within its `max_new_tokens`.

When the model fails (`ChatServiceError`), `on_error="raise"` re-raises (the summaries that did
arrive are cached); `on_error="message"` answers those rows with `UR2_SUMMARY_FAILED`, as the
code does after its 5 retries (not cached).  Counters (`stats()`): `summaries` (model replies),
`cache_hits`, `fallbacks`, `unparsed` (no `**Final Information**` label: the code's "No Final
Information found" text is returned), `failures`.

    python -m ragjax.services.proxy (--index DIR | --url URL) [--route TASK=DIR_OR_URL ...]
        (--chat-url URL [--chat-model NAME] [--api-key-env VAR] | --chat-checkpoint DIR)
        --port P [--task qa|math] [--mode strong|weak] [--topk 10] [--max-tokens 512]

(`--port 0`: any free port; the address is printed.)  A wrong index, route or checkpoint is
one `error:` line before anything listens.
"""

from __future__ import annotations

import argparse
import threading
from typing import Mapping, Optional, Sequence, Union

from ragjax.retrieval.query_cache import LRUCache
from ragjax.retrieval.types import Hit, Retriever, check_search_args
from ragjax.services.chat_model import ChatModel, ChatServiceError
from ragjax.services.templates import (UR2_FALLBACK, UR2_SUMMARY_FAILED, parse_ur2_summary,
                                       render_ur2_summary, ur2_summary_template)

ON_ERROR = ("raise", "message")


class SummarisingRetriever:
  """See the module docstring."""

  def __init__(self, inner: Retriever, chat: Union[ChatModel, Mapping[str, ChatModel]], *,
               task: str = "qa", mode: str = "strong", max_tokens: Optional[int] = None,
               temperature: Optional[float] = None, top_p: Optional[float] = None,
               cache_size: int = 100_000, on_error: str = "raise"):
    if not hasattr(inner, "search"):
      raise TypeError(f"inner must be a Retriever (with search), got {type(inner).__name__}")
    if on_error not in ON_ERROR:
      raise ValueError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
    ur2_summary_template(task, mode)                # validates mode
    self.inner, self.task, self.mode, self.on_error = inner, task, mode, on_error
    self.routes = dict(chat) if isinstance(chat, Mapping) else {"default": chat}
    self.max_tokens, self.temperature, self.top_p = max_tokens, temperature, top_p
    self.cache = LRUCache(cache_size)
    self._lock = threading.Lock()
    self.summaries = self.fallbacks = self.unparsed = self.failures = 0

  @property
  def cache_hits(self) -> int:
    return self.cache.hits

  def stats(self) -> dict:
    return {"summaries": self.summaries, "cache_hits": self.cache.hits,
            "fallbacks": self.fallbacks, "unparsed": self.unparsed, "failures": self.failures}

  def chat_for(self, task: str) -> ChatModel:
    if task in self.routes:
      return self.routes[task]
    if "default" in self.routes:
      return self.routes["default"]
    raise KeyError(f"no ChatModel for task {task!r} and no 'default' route; routes: "
                   f"{sorted(self.routes)}")

  def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
    return self.search_with_context(queries, k)

  def search_with_context(self, queries: Sequence[str], k: int,
                          prev_reasoning: Optional[Sequence[str]] = None,
                          tasks: Optional[Sequence[str]] = None) -> list[list[Hit]]:
    """`search`, with each query's previous reasoning steps and task (default: this proxy's)."""
    queries = check_search_args(queries, k)
    n = len(queries)
    reasoning = [""] * n if prev_reasoning is None else [str(r) for r in prev_reasoning]
    tasks = [self.task] * n if tasks is None else [t or self.task for t in tasks]
    if len(reasoning) != n or len(tasks) != n:
      raise ValueError(f"got {n} queries, {len(reasoning)} prev_reasoning and {len(tasks)} tasks")
    if not n:
      return []
    if hasattr(self.inner, "search_with_context"):   # e.g. a task router (QA -> abstracts)
      passages = self.inner.search_with_context(queries, k, tasks=tasks)
    else:
      passages = self.inner.search(queries, k)
    out: list = [None] * n
    todo: dict[tuple, list[int]] = {}
    for i, (q, hits) in enumerate(zip(queries, passages)):
      key = (tasks[i], self.mode, q, reasoning[i], tuple(h.id for h in hits))
      got = self.cache.get(key)
      if got is not None:
        out[i] = [got]
      else:
        todo.setdefault(key, []).append(i)
    by_task: dict[str, list[tuple]] = {}
    for key in todo:
      by_task.setdefault(key[0], []).append(key)
    error = None
    for task, keys in by_task.items():
      try:
        self._summarise(task, keys, todo, passages, out)
      except ChatServiceError as e:
        error = error or e
    if error is not None:
      raise error
    return out

  def _summarise(self, task: str, keys: list[tuple], todo: dict, passages, out: list) -> None:
    template = ur2_summary_template(task, self.mode)
    convs = []
    for key in keys:
      hits = passages[todo[key][0]]
      convs.append(render_ur2_summary(key[3], key[2], [h.contents for h in hits], task,
                                      self.mode))
    chat = self.chat_for(task)
    t = template
    kwargs = dict(max_tokens=self.max_tokens or t.max_tokens,
                  temperature=t.temperature if self.temperature is None else self.temperature,
                  top_p=t.top_p if self.top_p is None else self.top_p)
    failed = None
    try:
      replies = chat.complete(convs, **kwargs)
    except ChatServiceError as e:
      replies = list(e.partial) if e.partial is not None else [None] * len(keys)
      failed = e
    for key, reply in zip(keys, replies):
      hits = passages[todo[key][0]]
      ids = ",".join(h.id for h in hits)
      score = float(hits[0].score) if hits else 0.0
      if reply is None:
        with self._lock:
          self.failures += 1
        if self.on_error == "message":
          for i in todo[key]:
            out[i] = [Hit(f"failed:{ids}", UR2_SUMMARY_FAILED, score)]
        continue
      parsed = parse_ur2_summary(reply)
      with self._lock:
        self.summaries += 1
        self.fallbacks += parsed.fallback
        self.unparsed += not parsed.ok
      hit = Hit(("fallback:" if parsed.fallback else "summary:") + ids,
                UR2_FALLBACK if parsed.fallback else parsed.value, score)
      self.cache.put(key, hit)
      for i in todo[key]:
        out[i] = [hit]
    if failed is not None and self.on_error == "raise":
      raise failed


def _discover_model(base_url: str) -> str:
  import requests
  from ragjax.services.http_client import chat_completions_url
  url = chat_completions_url(base_url)[: -len("/chat/completions")] + "/models"
  try:
    r = requests.get(url, timeout=30)
    r.raise_for_status()
    return r.json()["data"][0]["id"]
  except (requests.RequestException, ValueError, KeyError, IndexError, TypeError) as e:
    raise ConnectionError(f"--chat-model not given and GET {url} did not name a model: "
                          f"{e}") from None


def _open_source(where: str, backend: Optional[str] = None):
  """An index directory, or a Search-R1 /retrieve server when `where` is an http(s) URL."""
  if where.startswith(("http://", "https://")):
    from ragjax.retrieval.client import SearchClient
    return SearchClient(where)
  from ragjax.retrieval.index import open_index
  return open_index(where, backend=backend)


def main(argv=None):
  from ragjax.retrieval.argtypes import port, positive_int
  ap = argparse.ArgumentParser(description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  src = ap.add_mutually_exclusive_group(required=True)
  src.add_argument("--index", help="index directory from ragjax.retrieval.build")
  src.add_argument("--url", help="a Search-R1 /retrieve server to summarise")
  chat = ap.add_mutually_exclusive_group(required=True)
  chat.add_argument("--chat-url", help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8001/v1")
  chat.add_argument("--chat-checkpoint", help="HF directory: summarise in this process")
  ap.add_argument("--route", action="append", default=[], metavar="TASK=DIR_OR_URL",
                  help="search TASK's queries in this index directory or /retrieve server "
                  "instead (UR²: --route qa=ABSTRACTS_INDEX); repeatable")
  ap.add_argument("--chat-model", default=None, help="model name (default: the server's first)")
  ap.add_argument("--api-key-env", default=None, help="environment variable holding the API key")
  ap.add_argument("--chat-cache", default=None, help="JSONL disk cache of summariser replies")
  ap.add_argument("--port", type=port, default=8002, help="1..65535, or 0 for any free port")
  ap.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1 only)")
  ap.add_argument("--backend", choices=("scann", "exact", "bm25"), default=None)
  ap.add_argument("--task", default="qa", help="'math' selects the math prompts")
  ap.add_argument("--mode", choices=("strong", "weak"), default="strong")
  ap.add_argument("--topk", type=positive_int, default=10,
                  help="passages summarised when a request omits topk (UR²: 10)")
  ap.add_argument("--max-tokens", type=positive_int, default=512, help="summary token budget")
  ap.add_argument("--chat-max-prompt-tokens", type=positive_int, default=8192,
                  help="with --chat-checkpoint: the longest summariser prompt")
  ap.add_argument("--temperature", type=float, default=None)
  ap.add_argument("--on-error", choices=ON_ERROR, default="raise")
  args = ap.parse_args(argv)
  from ragjax.errors import exit_on_user_error
  with exit_on_user_error("ragjax.services.proxy"):    # a wrong index, route or checkpoint
    proxy = _make_proxy(ap, args)
  from ragjax.http_server import serve
  from ragjax.retrieval.server import make_app
  info = {"summariser": args.chat_url or args.chat_checkpoint, "task": args.task,
          "mode": args.mode, "source": args.index or args.url,
          "routes": sorted(s.partition("=")[0] for s in args.route)}
  serve(make_app(proxy, args.topk, info), args.host, args.port, "ragjax.services.proxy")


def _make_proxy(ap, args) -> SummarisingRetriever:
  inner = _open_source(args.index or args.url, args.backend)
  if args.route:
    from ragjax.retrieval.routing import RoutedRetriever
    routes = {"default": inner}
    for spec in args.route:
      task, sep, where = spec.partition("=")
      if not sep or not task or not where:
        ap.error(f"--route {spec!r}: write TASK=INDEX_DIR or TASK=URL")
      routes[task] = _open_source(where, args.backend)
    inner = RoutedRetriever(routes)
  if args.chat_url:
    from ragjax.services.http_client import OpenAIChatClient
    model = OpenAIChatClient(args.chat_url, args.chat_model or _discover_model(args.chat_url),
                             api_key_env=args.api_key_env, cache_path=args.chat_cache)
  else:
    from ragjax.parallel.backend import start
    from ragjax.services.local import LocalChatModel
    start("ragjax.services.proxy")      # backend line; no CPU fallback of a GPU / TPU run
    model = LocalChatModel.from_checkpoint(args.chat_checkpoint, max_new_tokens=args.max_tokens,
                                           max_prompt_tokens=args.chat_max_prompt_tokens)
    if args.chat_cache:
      from ragjax.services.reply_cache import CachedChatModel
      model = CachedChatModel(model, args.chat_cache, model.name)
  return SummarisingRetriever(inner, model, task=args.task, mode=args.mode,
                              max_tokens=args.max_tokens, temperature=args.temperature,
                              on_error=args.on_error)


if __name__ == "__main__":
  main()
