"""An OpenAI-compatible chat-completions server on a ragjax model, batching concurrent requests.

    python -m ragjax.services.chat_server --checkpoint DIR|FILE.gguf --port 8001 [--host 127.0.0.1]
        [--model-name NAME] [--max-batch 16] [--max-wait-ms 5] [--max-prompt-tokens 2048]
        [--max-new-tokens 512]

`POST /v1/chat/completions` takes the OpenAI body (`model`, `messages`, `max_tokens` or
`max_completion_tokens`, `temperature` (default 1.0, as in OpenAI; 0 is greedy), `top_p`,
`stop`, `seed`; `n` must be 1 and `stream` false) and answers the OpenAI response
(`choices[0].message.content`, `finish_reason` "stop" | "length", `usage`).  Requests from all
clients go through one `RequestBatcher`, so a judge shared by several trainer processes decodes
their requests together.  Bad requests are 4xx in OpenAI's error form (`{"error": {"message",
"type", "param"}}`) naming the field: malformed JSON, a wrong field, more than
`--max-messages` messages or `--max-chars` characters, `max_tokens` above the cap, a prompt
longer than `--max-prompt-tokens` tokens, more than 4 stop strings or one over 32 bytes, a
`seed` outside [0, 2**32), JSON nested too deeply, a lone surrogate (400); a
body over `--max-body-bytes` (413, refused before it is read whole); another model name
(404); a full queue (503, which clients retry).  Temperature, top_p, stop strings and seed are
runtime values of the model's samplers: a new value compiles nothing
(`ragjax.services.local`), and message content is tokenised as text (a `<|im_end|>` in it is
not a control token).  A request that needs a program the model has not compiled yet (a first top-p or greedy
request, a new stop width, a longer prompt bucket) is compiled and decoded on the batcher's
compile thread, so it never holds up other clients' compiled requests.
`GET /health` reports the model and the batcher's counters (`compiling`: groups compiling now);
`GET /v1/models` lists the one model.  Binds 127.0.0.1 unless --host says otherwise;
`--port 0` takes any free port (the address is printed).  No API docs pages are served.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
import uuid
from typing import Optional

from fastapi import Request

from ragjax.http_body import RequestError as BodyError, parse_json, read_body
from ragjax.http_server import serve
from ragjax.retrieval.argtypes import float_range, port, positive_int
from ragjax.services.decode_batcher import Overloaded, RequestBatcher
from ragjax.services.chat_model import check_messages, check_sampling, check_seed, check_stop
from ragjax.services.local import LocalChatModel, PromptTooLong, check_stop_bounds


class RequestError(ValueError):
  """A bad request: HTTP `status`, and the offending field in `param`."""

  def __init__(self, message: str, param: Optional[str] = None, status: int = 400):
    super().__init__(message)
    self.param, self.status = param, status


def _number(body: dict, field: str, default, kind=float):
  v = body.get(field, default)
  if v is None:
    return default
  if isinstance(v, bool) or not isinstance(v, (int, float)) or \
      (kind is int and not isinstance(v, int)):
    raise RequestError(f"{field} must be {'an integer' if kind is int else 'a number'}, got "
                       f"{json.dumps(v)[:50]}", field)
  return kind(v)


def parse_request(body, *, model_name: str, max_messages: int, max_chars: int,
                  max_tokens_cap: int, default_max_tokens: int) -> dict:
  """Validates an OpenAI chat-completions body; `RequestError` names the bad field."""
  if not isinstance(body, dict):
    raise RequestError("the request body must be a JSON object")
  name = body.get("model")
  if name is not None and name != model_name:
    raise RequestError(f"model {name!r} is not served here; this server serves {model_name!r}",
                       "model", 404)
  if body.get("stream"):
    raise RequestError("stream=true is not supported", "stream")
  n = _number(body, "n", 1, int)
  if n != 1:
    raise RequestError(f"n must be 1, got {n}", "n")
  msgs = body.get("messages")
  if isinstance(msgs, list) and len(msgs) > max_messages:
    raise RequestError(f"messages has {len(msgs)} entries, more than the limit {max_messages}",
                       "messages")
  try:
    msgs = check_messages(msgs, "messages")
  except ValueError as e:
    raise RequestError(str(e), "messages") from None
  chars = sum(len(m["content"]) for m in msgs)
  if chars > max_chars:
    raise RequestError(f"messages hold {chars} characters, more than the limit {max_chars}",
                       "messages")
  field = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
  max_tokens = _number(body, field, default_max_tokens, int)
  if not 1 <= max_tokens <= max_tokens_cap:
    raise RequestError(f"{field} must be in [1, {max_tokens_cap}], got {max_tokens}", field)
  temperature = _number(body, "temperature", 1.0)
  top_p = _number(body, "top_p", 1.0)
  try:
    check_sampling(max_tokens, temperature, top_p)
  except ValueError as e:
    raise RequestError(str(e), "temperature" if "temperature" in str(e) else "top_p") from None
  try:
    stop = check_stop(body.get("stop"))
  except ValueError as e:
    raise RequestError(str(e), "stop") from None
  try:
    check_stop_bounds(stop)
  except ValueError as e:
    raise RequestError(str(e), "stop") from None
  seed = body.get("seed")
  if seed is not None:
    seed = _number(body, "seed", None, int)
    try:
      check_seed(seed)
    except ValueError as e:
      raise RequestError(str(e), "seed") from None
  return {"messages": msgs, "max_tokens": max_tokens, "temperature": temperature,
          "top_p": top_p, "stop": stop, "seed": seed}


def make_app(model: LocalChatModel, *, batcher: Optional[RequestBatcher] = None,
             model_name: Optional[str] = None, max_messages: int = 64, max_chars: int = 200_000,
             max_tokens_cap: Optional[int] = None, default_max_tokens: int = 256,
             max_wait_ms: float = 5.0, max_body_bytes: int = 8 << 20):
  """The FastAPI app; `app.state.batcher` is the batcher (made here unless given).  A body over
  `max_body_bytes` is refused (413) before it is read whole."""
  from fastapi import FastAPI
  from fastapi.responses import JSONResponse
  from starlette.concurrency import run_in_threadpool

  name = model_name or model.name
  cap = min(max_tokens_cap or model.max_new_tokens, model.max_new_tokens)
  batcher = batcher or RequestBatcher(model, max_wait_ms=max_wait_ms)
  app = FastAPI(title="ragjax chat completions", docs_url=None, redoc_url=None,
                openapi_url=None)
  app.state.batcher, app.state.model = batcher, model
  created = int(time.time())

  def error(status: int, message: str, param: Optional[str] = None, kind="invalid_request_error"):
    return JSONResponse(status_code=status, content={"error": {
        "message": message, "type": kind, "param": param, "code": None}})

  @app.post("/v1/chat/completions")
  async def chat_completions(request: Request):
    try:
      body = parse_json(await read_body(request, max_body_bytes))
    except BodyError as e:           # too large, not UTF-8, not JSON, nested too deeply
      return error(e.status, str(e))
    try:
      req = parse_request(body, model_name=name, max_messages=max_messages, max_chars=max_chars,
                          max_tokens_cap=cap, default_max_tokens=min(default_max_tokens, cap))
      prompt = await run_in_threadpool(model.encode, req["messages"])
      await run_in_threadpool(model.stop_table, req["stop"])   # built here, not on the batcher
    except RequestError as e:
      return error(e.status, str(e), e.param,
                   "model_not_found" if e.status == 404 else "invalid_request_error")
    except PromptTooLong as e:
      return error(400, str(e), "messages")
    except ValueError as e:
      return error(400, str(e), "messages")
    try:
      fut = batcher.submit(prompt, req["max_tokens"], req["temperature"], req["top_p"],
                           req["stop"], req["seed"])
    except Overloaded as e:
      return error(503, f"server overloaded: {e}", None, "server_error")
    try:
      out = await asyncio.wrap_future(fut)
    except Exception as e:                     # a model failure is the server's fault
      return error(500, f"generation failed: {type(e).__name__}: {e}", None, "server_error")
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
            "created": int(time.time()), "model": name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": out.text},
                         "finish_reason": out.finish_reason}],
            "usage": {"prompt_tokens": out.prompt_tokens,
                      "completion_tokens": out.completion_tokens,
                      "total_tokens": out.prompt_tokens + out.completion_tokens}}

  @app.get("/v1/models")
  def models():
    return {"object": "list", "data": [{"id": name, "object": "model", "created": created,
                                        "owned_by": "ragjax"}]}

  @app.get("/health")
  def health():
    return {"status": "ok", "model": name, **batcher.stats(), "decode_calls": model.decode_calls,
            "max_batch": batcher.max_batch, "max_new_tokens": cap}

  return app


class ServerThread:
  """Runs an ASGI app with uvicorn in a background thread (tests, benchmarks, notebooks).

      with ServerThread(app, port=0) as srv:      # port 0: any free port
        requests.get(srv.url + "/health")
  """

  def __init__(self, app, host: str = "127.0.0.1", port: int = 0):
    import uvicorn
    self.host = host
    # log_config=None: leave the host process's logging alone (uvicorn's loggers propagate).
    self._server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                                 log_config=None))
    self._thread = threading.Thread(target=self._server.run, name="uvicorn", daemon=True)
    self.port = port

  def start(self, timeout: float = 30.0) -> "ServerThread":
    self._thread.start()
    t_end = time.monotonic() + timeout
    while not self._server.started:
      if not self._thread.is_alive() or time.monotonic() > t_end:
        raise RuntimeError(f"server on {self.host}:{self.port} did not start")
      time.sleep(0.01)
    if self.port == 0:
      self.port = self._server.servers[0].sockets[0].getsockname()[1]
    return self

  @property
  def url(self) -> str:
    return f"http://{self.host}:{self.port}"

  def stop(self) -> None:
    self._server.should_exit = True
    self._thread.join(timeout=30)

  def __enter__(self):
    return self.start()

  def __exit__(self, *exc):
    self.stop()


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--checkpoint", required=True,
                  help="HF Llama/Qwen2 directory with tokenizer, or a .gguf file")
  ap.add_argument("--port", type=port, default=8001, help="1..65535, or 0 for any free port")
  ap.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1 only)")
  ap.add_argument("--model-name", default=None, help="served model id (default: directory name)")
  ap.add_argument("--max-batch", type=positive_int, default=16, help="rows per decode")
  ap.add_argument("--max-wait-ms", type=float_range(0, 60_000), default=5.0,
                  help="how long a batch waits for more requests")
  ap.add_argument("--max-prompt-tokens", type=positive_int, default=2048)
  ap.add_argument("--max-new-tokens", type=positive_int, default=512, help="cap on max_tokens")
  ap.add_argument("--max-messages", type=positive_int, default=64)
  ap.add_argument("--max-chars", type=positive_int, default=200_000)
  ap.add_argument("--max-queue", type=positive_int, default=1024)
  ap.add_argument("--max-body-bytes", type=positive_int, default=8 << 20,
                  help="largest request body (413 above it)")
  ap.add_argument("--dtype", default=None, help="compute dtype override, e.g. bfloat16")
  args = ap.parse_args(argv)      # every number is checked here, before the model loads
  from ragjax.errors import exit_on_user_error
  from ragjax.parallel.backend import start
  start("ragjax.services.chat_server")         # backend line; no CPU fallback of a GPU / TPU run
  with exit_on_user_error("ragjax.services.chat_server"):   # a wrong directory: one line, exit 2
    model = LocalChatModel.from_checkpoint(args.checkpoint, name=args.model_name,
                                           dtype=args.dtype, max_batch=args.max_batch,
                                           max_prompt_tokens=args.max_prompt_tokens,
                                           max_new_tokens=args.max_new_tokens)
  batcher = RequestBatcher(model, max_wait_ms=args.max_wait_ms, max_queue=args.max_queue)
  app = make_app(model, batcher=batcher, max_messages=args.max_messages,
                 max_chars=args.max_chars, max_body_bytes=args.max_body_bytes)
  serve(app, args.host, args.port, "ragjax.services.chat_server")


if __name__ == "__main__":
  main()
