"""The OpenAI-compatible client's failure modes and disk cache, against real servers on
127.0.0.1: a ragjax chat server process that is killed and restarted, a socket that never
answers, and a stdlib HTTP endpoint that answers chosen status codes."""

import http.server
import json
import os
import signal
import socket
import threading
import time

import pytest

from _retrieval_helpers import free_port, stop_server
from test_services_fixtures import conversations, local_model, start_chat_server
from ragjax.services.reply_cache import CachedChatModel, ChatCache
from ragjax.services.chat_model import ChatServiceError
from ragjax.services.http_client import OpenAIChatClient, chat_completions_url
from ragjax.services.chat_server import ServerThread, make_app


def test_killed_server_is_retried_then_fails_clearly_and_a_restart_within_the_deadline_succeeds(
    tmp_path):
  model = local_model()
  first, second = conversations(3, offset=200), conversations(3, offset=300)
  ref = model.complete(first + second, max_tokens=12)
  port = free_port()
  proc = start_chat_server(port)
  url = f"http://127.0.0.1:{port}/v1"
  cache = str(tmp_path / "judge.jsonl")
  try:
    client = OpenAIChatClient(url, "judge", max_concurrency=4, timeout=60, backoff=0.05,
                              max_backoff=0.2, max_retries=10_000, deadline=120.0,
                              cache_path=cache)
    # A separate process decodes the same greedy text as the in-process model.
    assert client.complete(first, max_tokens=12) == ref[:3]
    client.deadline = 2.0
  finally:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
  # Server gone: the cached rows answer, the new ones are retried until the deadline.
  t0 = time.monotonic()
  with pytest.raises(ChatServiceError) as e:
    client.complete(first + second, max_tokens=12)
  assert time.monotonic() - t0 < 10
  msg = str(e.value)
  assert f"POST {url}/chat/completions failed after" in msg and "attempts (deadline of 2s passed)" \
      in msg and "connection failed" in msg and "3 of 3 requests failed" in msg
  assert e.value.partial == ref[:3] + [None] * 3        # no row lost, none invented
  stats = client.stats()
  assert stats["retry_count"] >= 3 and stats["cache_hits"] == 3 and stats["failures"] == 3
  # Restarted while the call is retrying (deadline 120 s): the call succeeds.
  holder = {}

  def restart():
    time.sleep(1.0)
    holder["proc"] = start_chat_server(port)
  t = threading.Thread(target=restart)
  t.start()
  client.deadline = 120.0
  try:
    sent = client.stats()["requests_sent"]
    got = client.complete(first + second, max_tokens=12)
  finally:
    t.join()
    if "proc" in holder:
      stop_server(holder["proc"])
  assert got == ref
  assert client.stats()["cache_hits"] == 6              # the first three never re-sent
  assert client.stats()["requests_sent"] - sent >= 3
  client.close()
  # Every reply is on disk once; a new client answers all six without a server.
  with open(cache) as f:
    assert len([json.loads(line) for line in f]) == 6
  offline = OpenAIChatClient(url, "judge", deadline=1.0, cache_path=cache)
  assert offline.complete(first + second, max_tokens=12) == ref
  assert offline.stats()["requests_sent"] == 0 and offline.stats()["cache_hits"] == 6


def test_timeouts_and_deadline_end_in_one_clear_error():
  with socket.socket() as s:          # accepts TCP connections but never answers
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    port = s.getsockname()[1]
    client = OpenAIChatClient(f"http://127.0.0.1:{port}", "judge", timeout=0.5, max_retries=1,
                              backoff=0.05)
    t0 = time.monotonic()
    with pytest.raises(ChatServiceError) as e:
      client.complete(conversations(1))
    assert time.monotonic() - t0 < 5
    msg = str(e.value)
    assert f"http://127.0.0.1:{port}/v1/chat/completions failed after 2 attempts (retries " \
        f"exhausted): timed out after 0.5s" in msg
    assert client.stats()["requests_sent"] == 2 and client.stats()["retry_count"] == 1
    # Many retries allowed, but the overall deadline ends the call.
    client = OpenAIChatClient(f"http://127.0.0.1:{port}", "judge", timeout=0.4, max_retries=100,
                              backoff=0.05, deadline=1.5)
    t0 = time.monotonic()
    with pytest.raises(ChatServiceError, match=r"deadline of 1.5s passed"):
      client.complete(conversations(2))
    assert time.monotonic() - t0 < 4


class _StatusServer(http.server.ThreadingHTTPServer):
  """Answers POSTs with the next status from `script` (then 200 with an OpenAI body)."""

  def __init__(self, script):
    self.script, self.seen = list(script), []
    super().__init__(("127.0.0.1", 0), _StatusHandler)


class _StatusHandler(http.server.BaseHTTPRequestHandler):
  def do_POST(self):  # noqa: N802
    body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
    self.server.seen.append((body, self.headers.get("Authorization")))
    status = self.server.script.pop(0) if self.server.script else 200
    payload = {"error": {"message": f"status {status}"}} if status != 200 else {
        "choices": [{"index": 0, "message": {"role": "assistant",
                                             "content": "echo: " + body["messages"][-1]["content"]},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2}}
    data = json.dumps(payload).encode()
    self.send_response(status)
    self.send_header("Content-Type", "application/json")
    self.send_header("Content-Length", str(len(data)))
    self.end_headers()
    self.wfile.write(data)

  def log_message(self, *args):
    pass


@pytest.fixture
def status_server():
  servers = []

  def make(script):
    srv = _StatusServer(script)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    servers.append(srv)
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"
  yield make
  for srv in servers:
    srv.shutdown()
    srv.server_close()


def test_retries_429_and_5xx_not_other_4xx_and_sends_the_key(status_server, monkeypatch):
  monkeypatch.setenv("RAGJAX_TEST_KEY", "sk-test-123")
  srv, url = status_server([503, 429, 500])
  client = OpenAIChatClient(url, "m", api_key_env="RAGJAX_TEST_KEY", backoff=0.01, max_retries=5)
  out = client.generate([[{"role": "user", "content": "hi"}]], max_tokens=7, temperature=0.5,
                        stop=["\n"], top_p=0.9, seed=4)
  assert out[0].text == "echo: hi" and out[0].completion_tokens == 2
  assert client.stats()["requests_sent"] == 4 and client.stats()["retry_count"] == 3
  body, auth = srv.seen[-1]
  assert auth == "Bearer sk-test-123"
  assert body == {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 7,
                  "temperature": 0.5, "stop": ["\n"], "top_p": 0.9, "seed": 4}
  srv, url = status_server([400, 401, 404])
  client = OpenAIChatClient(url, "m", backoff=0.01)
  for code in (400, 401, 404):
    with pytest.raises(ChatServiceError, match=rf"HTTP {code}.*not retried"):
      client.complete([[{"role": "user", "content": "hi"}]])
  assert client.stats()["requests_sent"] == 3
  srv, url = status_server([502] * 10)
  client = OpenAIChatClient(url, "m", backoff=0.01, max_retries=2)
  with pytest.raises(ChatServiceError, match=r"failed after 3 attempts \(retries exhausted\): "
                     r"HTTP 502"):
    client.complete([[{"role": "user", "content": "hi"}]])
  with pytest.raises(ValueError, match="RAGJAX_UNSET_KEY.*not set"):
    OpenAIChatClient(url, "m", api_key_env="RAGJAX_UNSET_KEY")
  with pytest.raises(ValueError, match="base_url must be an http"):
    OpenAIChatClient("127.0.0.1:8000", "m")
  assert chat_completions_url("http://h:1") == "http://h:1/v1/chat/completions"
  assert chat_completions_url("http://h:1/v1/") == "http://h:1/v1/chat/completions"
  assert chat_completions_url("http://h:1/x/chat/completions") == "http://h:1/x/chat/completions"


def test_disk_cache_hits_survive_a_new_client_and_a_partial_last_line(tmp_path):
  model = local_model()
  convs = conversations(4, offset=400)
  path = str(tmp_path / "sub" / "cache.jsonl")
  with ServerThread(make_app(model)) as srv:
    client = OpenAIChatClient(srv.url, "judge", cache_path=path)
    first = client.complete(convs, max_tokens=10)
    assert client.stats()["requests_sent"] == 4 and client.stats()["cache_misses"] == 4
    assert client.complete(convs, max_tokens=10) == first
    assert client.stats()["requests_sent"] == 4 and client.stats()["cache_hits"] == 4
    # Any change to the request is a different entry.
    client.complete(convs[:1], max_tokens=11)
    client.complete(convs[:1], max_tokens=10, stop=["x"])
    client.complete(convs[:1], max_tokens=10, temperature=0.5, seed=1)
    client.complete([convs[0][1:]], max_tokens=10)
    assert client.stats()["requests_sent"] == 8
    other = OpenAIChatClient(srv.url, "other-model", cache_path=path)
    with pytest.raises(ChatServiceError, match="404"):
      other.complete(convs[:1], max_tokens=10)
    client.close()
  # A crash mid-write leaves half a line; it is skipped, and the next record starts a new line.
  with open(path, "a") as f:
    f.write('{"key": "abc", "request": {"model": "judge", "mess')
  again = OpenAIChatClient("http://127.0.0.1:9", "judge", cache_path=path, deadline=0.5)
  assert again.cache.skipped_lines == 1 and len(again.cache) == 8
  assert again.complete(convs, max_tokens=10) == first            # no server needed
  assert again.stats()["requests_sent"] == 0
  again.cache.put("k2", {"model": "judge"}, "late reply")
  again.close()
  with open(path) as f:
    lines = f.read().split("\n")
  assert lines[-1] == "" and json.loads(lines[-2])["text"] == "late reply"
  reloaded = ChatCache(path)
  assert reloaded.skipped_lines == 1 and len(reloaded) == 9 and reloaded.get("k2")["text"] == \
      "late reply"
  # The same cache in front of the in-process model (a resumed run with a local judge).
  cached = CachedChatModel(model, str(tmp_path / "local.jsonl"), model_name="judge")
  before = model.calls
  assert cached.complete(convs, max_tokens=10) == first
  assert cached.complete(convs, max_tokens=10) == first
  assert model.calls == before + 1 and cached.cache_hits == 4 and cached.cache_misses == 4
