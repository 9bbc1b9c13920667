"""Request bodies of the HTTP servers (`/retrieve`, chat completions): read under a byte limit,
parsed as JSON, every failure a `RequestError` with a 4xx status and a message.

A client can send anything: a body larger than memory (refused at its declared length, or as
soon as the stream passes the limit, before it is all read), bytes that are not UTF-8, JSON
nested deeper than Python's parser recurses (a RecursionError, which would otherwise be a 500).
"""

from __future__ import annotations

import json


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
  parts, size = [], 0
  async for part in request.stream():
    size += len(part)
    if size > max_bytes:
      raise RequestError(413, f"request body over {max_bytes} bytes ({flag})")
    parts.append(part)
  return b"".join(parts)


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
