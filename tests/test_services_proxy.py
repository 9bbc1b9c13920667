"""UR²'s summarising retrieval proxy: summary / fallback / unparsed paths, the cache, task
routing, model failures, and the proxy served as a Search-R1 `/retrieve` server by its CLI."""

import os
import re
import subprocess
import sys
import time

import pytest
import requests

from _retrieval_helpers import REPO, free_port, stop_server, write_jsonl
from _rollout_helpers import PASSAGES, CountingRetriever, bm25_retriever
from test_services_fixtures import ScriptedChat, local_model
from ragjax.retrieval.client import SearchClient
from ragjax.retrieval.index import build_index, open_index
from ragjax.retrieval.types import Hit, Retriever
from ragjax.rollout.protocols import ur2 as ur2_protocol
from ragjax.services.chat_model import ChatServiceError
from ragjax.services.proxy import SummarisingRetriever, main as proxy_main
from ragjax.services.chat_server import ServerThread, make_app
from ragjax.services.templates import UR2_FALLBACK, UR2_NO_FINAL_INFORMATION, UR2_SUMMARY_FAILED
from _xla_helpers import xla_flags


def _query(msgs) -> str:
  text = msgs[-1]["content"]
  return re.search(r"- \*\*Current Search Query:\*\*  \n(.*)\n", text).group(1)


def summariser(msgs) -> str:
  """A summariser that follows the strong prompt: reasoning-type queries get the fallback."""
  q = _query(msgs)
  if q.startswith("compute"):
    return f"The query is not knowledge-based.\n**Final Information**\n```\n{UR2_FALLBACK}\n```"
  n = len(re.findall(r"Wikipedia Content \d+: ", msgs[-1]["content"]))
  return f"Classification: knowledge-based.\n\n**Final Information**\n\nFacts for {q} from {n}."


def test_proxy_summarises_falls_back_and_caches_by_query_and_passages():
  inner = CountingRetriever(bm25_retriever())
  chat = ScriptedChat(summariser)
  proxy = SummarisingRetriever(inner, chat, max_tokens=64)
  assert isinstance(proxy, Retriever)
  queries = ["capital of Zorbland", "compute 17 * 23", "capital of Zorbland"]
  out = proxy.search(queries, 3)
  ref = bm25_retriever().search(queries, 3)
  assert [len(row) for row in out] == [1, 1, 1]
  assert out[0][0] == Hit("summary:" + ",".join(h.id for h in ref[0]),
                          "Facts for capital of Zorbland from 3.", ref[0][0].score)
  assert out[1][0].contents == UR2_FALLBACK and out[1][0].id.startswith("fallback:")
  assert out[2] == out[0]
  assert chat.calls == 1 and len(chat.seen) == 2          # the repeated query is asked once
  prompt = chat.seen[0][-1]["content"]
  assert prompt.startswith("**Task Instruction:**\n\nYour first task is to determine")
  assert f"Wikipedia Content 1: {ref[0][0].contents}\n\nWikipedia Content 2: " in prompt
  assert "- **Previous Reasoning Steps:**  \n\n\n" in prompt
  assert proxy.stats() == {"summaries": 2, "cache_hits": 0, "fallbacks": 1, "unparsed": 0,
                           "failures": 0}
  # The UR² rollout sees the fallback and appends its notice.
  obs = "".join(s.text for s in ur2_protocol.UR2().observation(queries[1], out[1]))
  assert ur2_protocol.FALLBACK_NOTICE in obs
  assert ur2_protocol.FALLBACK_NOTICE not in "".join(
      s.text for s in ur2_protocol.UR2().observation(queries[0], out[0]))
  # Cached by (query, passage ids): no model call; new passages (k=2) are a new summary.
  assert proxy.search(queries[:2], 3) == out[:2]
  assert chat.calls == 1 and proxy.cache_hits == 2 and len(inner.calls) == 2
  two = proxy.search(queries[:1], 2)
  assert chat.calls == 2 and two[0][0].contents == "Facts for capital of Zorbland from 2."
  # A reply without the label: the code's text, counted.
  bare = SummarisingRetriever(bm25_retriever(), ScriptedChat(lambda m: "I found nothing useful."))
  assert bare.search(["Amber Sea"], 2)[0][0].contents == UR2_NO_FINAL_INFORMATION
  assert bare.stats()["unparsed"] == 1
  assert proxy.search([], 3) == []
  with pytest.raises(TypeError, match="single str"):
    proxy.search("capital of Zorbland", 3)


def test_proxy_routes_by_task_and_handles_model_failures():
  math_chat, qa_chat = ScriptedChat(summariser), ScriptedChat(summariser)
  proxy = SummarisingRetriever(bm25_retriever(), {"math": math_chat, "default": qa_chat},
                               mode="weak")
  out = proxy.search_with_context(["Quillport Observatory", "Tessaly River"], 2,
                                  prev_reasoning=["I need the comet facts.", ""],
                                  tasks=["math", "qa"])
  assert math_chat.calls == qa_chat.calls == 1
  math_prompt, qa_prompt = math_chat.seen[0][-1]["content"], qa_chat.seen[0][-1]["content"]
  assert "You are assisting in solving a math problem." in math_prompt
  assert "Previous Reasoning Steps:**  \nI need the comet facts.\n" in math_prompt
  assert "math problem" not in qa_prompt and UR2_FALLBACK not in qa_prompt    # weak: no Step 1
  assert out[0][0].contents == "Facts for Quillport Observatory from 2."
  with pytest.raises(KeyError, match="no ChatModel for task 'mcq'"):
    SummarisingRetriever(bm25_retriever(), {"math": math_chat}).search_with_context(
        ["x"], 1, tasks=["mcq"])
  with pytest.raises(ValueError, match="on_error must be one of"):
    SummarisingRetriever(bm25_retriever(), qa_chat, on_error="ignore")
  with pytest.raises(ValueError, match="got 2 queries, 1 prev_reasoning"):
    proxy.search_with_context(["a", "b"], 1, prev_reasoning=["r"])

  class HalfFailing:
    """Answers the first conversation of each call; the rest fail as a client's error does."""
    calls = 0

    def complete(self, messages_list, **kw):
      HalfFailing.calls += 1
      texts = [summariser(messages_list[0])] + [None] * (len(messages_list) - 1)
      raise ChatServiceError("POST http://127.0.0.1:1/v1/chat/completions failed after 3 "
                             "attempts", partial=texts)
  soft = SummarisingRetriever(bm25_retriever(), HalfFailing(), on_error="message")
  got = soft.search(["Amber Sea", "Quillport harbour"], 2)
  assert got[0][0].contents == "Facts for Amber Sea from 2."
  assert got[1][0].contents == UR2_SUMMARY_FAILED and got[1][0].id.startswith("failed:")
  assert soft.stats()["failures"] == 1 and soft.stats()["summaries"] == 1
  got = soft.search(["Amber Sea", "Quillport harbour"], 2)      # the failed row is retried
  assert HalfFailing.calls == 2 and soft.cache_hits == 1
  assert got[1][0].contents == "Facts for Quillport harbour from 2."
  hard = SummarisingRetriever(bm25_retriever(), HalfFailing())
  with pytest.raises(ChatServiceError, match="failed after 3 attempts"):
    hard.search(["Amber Sea", "Zorbland capital"], 2)
  assert hard.search(["Amber Sea"], 2)[0][0].contents == "Facts for Amber Sea from 2."
  assert HalfFailing.calls == 3                               # the summary that arrived is kept


def test_proxy_cli_validates_the_port(capsys):
  for bad in ("-1", "65536"):             # 0 is any free port, as for ragjax.retrieval.server
    with pytest.raises(SystemExit):
      proxy_main(["--index", "unused", "--chat-url", "http://127.0.0.1:1", "--port", bad])
    assert "argument --port: must be a TCP port in 1..65535" in capsys.readouterr().err


def test_proxy_cli_serves_search_r1_retrieve_over_a_real_chat_server(tmp_path):
  corpus = write_jsonl(str(tmp_path / "corpus.jsonl"),
                       [{"id": i, "contents": f'"{t}"\n{x}'} for i, t, x in PASSAGES])
  index = str(tmp_path / "index")
  build_index(corpus, index, "bm25")
  model = local_model()
  queries = ["Who founded the Quillport Observatory?", "compute the harbour area"]
  with ServerThread(make_app(model)) as chat_srv:
    before = model.decode_calls
    port = free_port()
    env = {**os.environ, "PYTHONPATH": REPO, "JAX_PLATFORMS": "cpu"}
    env["XLA_FLAGS"] = xla_flags()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragjax.services.proxy", "--index", index, "--chat-url",
         chat_srv.url + "/v1", "--port", str(port), "--topk", "3", "--max-tokens", "16",
         "--temperature", "0"], cwd=REPO, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT)
    try:
      url = f"http://127.0.0.1:{port}"
      t_end = time.time() + 120
      while True:
        assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
        try:
          health = requests.get(url + "/health", timeout=1).json()
          break
        except requests.RequestException:
          assert time.time() < t_end, "proxy did not come up"
          time.sleep(0.2)
      assert health["summariser"] == chat_srv.url + "/v1" and health["mode"] == "strong"
      served = SearchClient(url, timeout=120).search(queries, 3)
      body = requests.post(url + "/retrieve", json={"queries": queries[:1]}, timeout=120).json()
    finally:
      stop_server(proc)
    assert model.decode_calls > before                  # the proxy's summaries hit the server
  # The same proxy in-process, on the same model, gives the same hits.
  local = SummarisingRetriever(open_index(index), model, max_tokens=16, temperature=0.0)
  want = local.search(queries, 3)
  assert served == [[Hit(h.id, h.contents, pytest.approx(h.score)) for h in row] for row in want]
  ids = [h.id for h in bm25_retriever().search(queries[:1], 3)[0]]
  assert served[0][0].id == "summary:" + ",".join(ids)
  # A random model does not write the label: the code's reply, as the paper's code returns it.
  assert served[0][0].contents == UR2_NO_FINAL_INFORMATION and local.stats()["unparsed"] == 2
  assert body["result"] == [[{"id": served[0][0].id, "contents": UR2_NO_FINAL_INFORMATION}]]
  assert set(body) == {"result", "timing"} and body["timing"]["batch_queries"] == 1


def test_proxy_routes_corpora_by_task_and_takes_contexts_over_http():
  """QA queries search the 'qa' route's corpus, the rest the default one; a served proxy gets
  each query's task and reasoning so far as `contexts` (what the UR² rollout sends)."""
  from ragjax.retrieval.routing import RoutedRetriever
  from ragjax.retrieval.server import make_app as retrieval_app
  from _rollout_helpers import StaticRetriever
  abstracts = CountingRetriever(StaticRetriever(['"Abstract"\nAn abstract about Quillport.']))
  full = CountingRetriever(bm25_retriever())
  router = RoutedRetriever({"qa": abstracts, "default": full})
  chat = ScriptedChat(lambda msgs: "**Final Information**\n\n" + msgs[-1]["content"][-80:])
  proxy = SummarisingRetriever(router, chat, task="qa", max_tokens=32)
  queries = ["Quillport founder", "definition of a harbour", "Tessaly River"]
  contexts = {"tasks": ["qa", "math", "mcq"], "prev_reasoning": ["I think. ", "Let x = 2. ", ""]}
  with ServerThread(retrieval_app(proxy, 3)) as srv:
    client = SearchClient(srv.url, timeout=60)
    served = client.search_with_context(queries, 3, **contexts)
    asked = len(chat.seen)
    again = client.search_with_context(queries, 3, **contexts)      # the client's cache
    plain = client.search(queries[:1], 3)                            # no contexts: the proxy's task
    bad = requests.post(srv.url + "/retrieve",
                        json={"queries": queries, "contexts": {"tasks": ["qa"]}}, timeout=60)
  assert again == served and asked == 3
  assert abstracts.calls == [(["Quillport founder"], 3)] * 2   # the plain call: the proxy's qa
  assert full.calls == [(["definition of a harbour", "Tessaly River"], 3)]
  prompts = [m[-1]["content"] for m in chat.seen]
  assert "You are assisting in solving a math problem" in prompts[1]      # math prompt for math
  assert "Let x = 2. " in prompts[1] and "I think. " in prompts[0]
  assert served[0][0].id == "summary:s0"
  assert plain[0][0].id == "summary:s0" and len(chat.seen) == 4   # new context: asked again
  assert bad.status_code == 422 and "one per query" in bad.json()["detail"]
  # a plain index server ignores contexts
  with ServerThread(retrieval_app(bm25_retriever(), 3)) as srv:
    got = SearchClient(srv.url, timeout=60).search_with_context(queries, 3, **contexts)
  assert [[h.id for h in row] for row in got] == [[h.id for h in row] for row in
                                                  bm25_retriever().search(queries, 3)]
  with pytest.raises(ValueError, match="'default' route"):
    RoutedRetriever({"qa": abstracts})
