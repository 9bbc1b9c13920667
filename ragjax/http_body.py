"""Request bodies of the HTTP servers (`/retrieve`, chat completions): read under a byte limit,
parsed as JSON, every failure a `RequestError` with a 4xx status and a message.

A client can send anything: a body larger than memory (refused at its declared length, or as
soon as the stream passes the limit, before it is all read), bytes that are not UTF-8, JSON
nested deeper than Python's parser recurses (a RecursionError, which would otherwise be a 500).
A client that goes away mid-body (a `Content-Length` larger than what it sends, a dropped
chunked upload, a slow client timed out) is a normal event: one log line, a `ClientGone`
(status 499, nginx's "client closed request"; nobody reads the reply), never a traceback.
"""

from __future__ import annotations

import json
import logging

log = logging.getLogger("ragjax.http")


class RequestError(ValueError):
  """A request the server will not run: HTTP `status` and the message for the reply."""

  def __init__(self, status: int, message: str):
    super().__init__(message)
    self.status = status


async def read_body(request, max_bytes: int, flag: str = "--max-body-bytes") -> bytes:
  """The body of a starlette `request`, or 413 once it is over `max_bytes` (`flag` sets it)."""
  declared = request.headers.get("content-length", "")
  if declared.isdigit() and int(declared) > max_bytes:
    raise RequestError(413, f"request body of {declared} bytes; the limit is {max_bytes} ({flag})")
  from starlette.requests import ClientDisconnect
  parts, size = [], 0
  try:
    async for part in request.stream():
      size += len(part)
      if size > max_bytes:
        raise RequestError(413, f"request body over {max_bytes} bytes ({flag})")
      parts.append(part)
  except ClientDisconnect:
    client = f"{request.client.host}:{request.client.port}" if request.client else "a client"
    log.warning("%s went away after %d bytes of its request body to %s", client, size,
                request.url.path)
    raise ClientGone(f"client went away after {size} bytes of the body") from None
  return b"".join(parts)


class ClientGone(RequestError):
  """The client closed the connection before its body was all sent."""

  def __init__(self, message: str):
    super().__init__(499, message)


def parse_json(body: bytes):
  """The JSON value of a UTF-8 body, or 400 saying why not."""
  try:
    return json.loads(body.decode("utf-8"))
  except UnicodeDecodeError as e:
    raise RequestError(400, f"request body is not UTF-8 ({e.reason} at byte {e.start})") from None
  except RecursionError:
    raise RequestError(400, "request body is nested too deeply to parse") from None
  except ValueError as e:
    raise RequestError(400, f"request body is not JSON: {e}") from None
