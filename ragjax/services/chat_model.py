"""The one interface judges, summarisers and teachers are called through: `ChatModel`.

    texts = chat.complete([[{"role": "user", "content": "..."}], ...], max_tokens=64,
                          temperature=0.0, stop=("\\n",))

A batch of conversations in, one reply text per conversation out, in order.  Two
implementations: `OpenAIChatClient` (any OpenAI-compatible `/v1/chat/completions` endpoint:
vLLM, SGLang, a hosted API, or `python -m ragjax.services.chat_server`) and `LocalChatModel` (a
ragjax decoder in this process, e.g. a frozen copy of the policy).  Both follow the OpenAI meaning
of the arguments: `stop` strings end the reply and are not part of it; `temperature == 0` is
greedy.  Every failure to get a reply is a `ChatServiceError`.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Optional, Protocol, Sequence, runtime_checkable

Message = dict          # {"role": "system" | "user" | "assistant", "content": str}
from ragjax.errors import ServiceUnavailable

ROLES = ("system", "user", "assistant")


class ChatServiceError(RuntimeError):
  """A reply could not be had.  `partial` holds the replies that did arrive (None elsewhere),
  in request order, so a caller can keep them; they are already in the client's disk cache."""

  def __init__(self, message: str, partial: Optional[list] = None):
    super().__init__(message)
    self.partial = partial


class ChatServiceUnavailable(ChatServiceError, ServiceUnavailable):
  """The endpoint stayed unreachable past the client's deadline or retries (a passing fault:
  a trainer retries its step)."""


@dataclasses.dataclass(frozen=True)
class Completion:
  """One reply: its text, why it ended ("stop": eos or a stop string, "length": the token
  budget) and token counts (None when the endpoint did not report them)."""
  text: str
  finish_reason: str = "stop"
  prompt_tokens: Optional[int] = None
  completion_tokens: Optional[int] = None


@runtime_checkable
class ChatModel(Protocol):
  """`complete(messages_list, ...)` returns one reply text per conversation, in order.

  `seed` (optional) makes sampled replies repeatable and distinguishes draws of one prompt.
  """

  def complete(self, messages_list: Sequence[Sequence[Message]], max_tokens: int = 256,
               temperature: float = 0.0, stop: Optional[Sequence[str]] = None,
               top_p: float = 1.0, seed: Optional[int] = None) -> list[str]:
    ...


def check_stop(stop) -> tuple[str, ...]:
  """`stop` as a tuple of non-empty strings (None, one string or a list, as in OpenAI)."""
  if stop is None:
    return ()
  if isinstance(stop, str):
    stop = [stop]
  if not isinstance(stop, (list, tuple)):
    raise ValueError(f"stop must be a string or a list of strings, got {type(stop).__name__}")
  for i, s in enumerate(stop):
    if not isinstance(s, str) or not s:
      raise ValueError(f"stop[{i}] must be a non-empty string, got {s!r}")
  return tuple(stop)


def check_sampling(max_tokens, temperature, top_p) -> None:
  """Clear errors for the sampling arguments every `ChatModel` takes."""
  if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
    raise ValueError(f"max_tokens must be a positive int, got {max_tokens!r}")
  if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) \
      or not 0.0 <= temperature <= 2.0:
    raise ValueError(f"temperature must be a number in [0, 2], got {temperature!r}")
  if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0.0 < top_p <= 1.0:
    raise ValueError(f"top_p must be a number in (0, 1], got {top_p!r}")


SEED_RANGE = 2 ** 32        # the sampler's PRNG seeds are uint32


def check_seed(seed) -> None:
  """None, or an integer the sampler's PRNG takes: [0, 2**32)."""
  if seed is None:
    return
  if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < SEED_RANGE:
    raise ValueError(f"seed must be an integer in [0, {SEED_RANGE - 1}], got {seed!r}")


_SURROGATE = re.compile("[\ud800-\udfff]")


def check_messages(messages, where: str = "messages") -> list[Message]:
  """One conversation as a list of {"role", "content"} dicts with string content.

  OpenAI's list-of-parts content (`[{"type": "text", "text": ...}]`) is joined into one string.
  Errors name the offending field, e.g. `messages[2].content`.
  """
  if isinstance(messages, (str, bytes)) or not isinstance(messages, (list, tuple)):
    raise ValueError(f"{where} must be a list of messages, got {type(messages).__name__}")
  if not messages:
    raise ValueError(f"{where} is empty")
  out = []
  for i, m in enumerate(messages):
    field = f"{where}[{i}]"
    if not isinstance(m, dict):
      raise ValueError(f"{field} must be an object with 'role' and 'content', got "
                       f"{type(m).__name__}")
    role = m.get("role")
    if role not in ROLES:
      raise ValueError(f"{field}.role must be one of {', '.join(ROLES)}, got {role!r}")
    content = m.get("content")
    if isinstance(content, list):
      parts = []
      for j, p in enumerate(content):
        if not isinstance(p, dict) or p.get("type") != "text" or not isinstance(p.get("text"), str):
          raise ValueError(f"{field}.content[{j}] must be {{'type': 'text', 'text': str}}")
        parts.append(p["text"])
      content = "".join(parts)
    if not isinstance(content, str):
      raise ValueError(f"{field}.content must be a string, got {type(content).__name__}")
    bad = _SURROGATE.search(content)
    if bad:                          # JSON can carry "\ud800"; no tokenizer can encode it
      raise ValueError(f"{field}.content holds a lone surrogate U+{ord(bad[0]):04X} at "
                       f"character {bad.start()} (not Unicode text)")
    out.append({"role": role, "content": content})
  return out


def check_messages_list(messages_list) -> list[list[Message]]:
  """A batch of conversations; a single conversation passed by mistake is a clear error."""
  if isinstance(messages_list, (str, bytes)) or not isinstance(messages_list, (list, tuple)):
    raise ValueError(f"messages_list must be a list of conversations, got "
                     f"{type(messages_list).__name__}")
  if messages_list and isinstance(messages_list[0], dict):
    raise ValueError("messages_list must be a list of conversations (lists of messages), got a "
                     "single conversation; wrap it in a list")
  return [check_messages(m, f"messages_list[{i}]") for i, m in enumerate(messages_list)]


class ReplyBudget:
  """`chat` asked for at most `max_tokens` tokens a reply: a caller's larger `max_tokens` (a
  template's, e.g. R3-RAG's 512) is lowered to the budget the service was configured with
  (`judge.max_new_tokens`), which an in-process model refuses to exceed and a server caps
  (`chat_server --max-new-tokens`: a larger request is a 400).  Other attributes are `chat`'s."""

  def __init__(self, chat, max_tokens: int):
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
      raise ValueError(f"max_tokens must be a positive int, got {max_tokens!r}")
    self.chat, self.max_tokens = chat, max_tokens

  def complete(self, messages_list, max_tokens: int = 256, temperature: float = 0.0,
               stop: Optional[Sequence[str]] = None, top_p: float = 1.0,
               seed: Optional[int] = None) -> list[str]:
    return self.chat.complete(messages_list, min(max_tokens, self.max_tokens), temperature,
                              stop, top_p, seed)

  def __getattr__(self, name):
    if name == "chat":               # not set yet (a copy being built): no recursion
      raise AttributeError(name)
    return getattr(self.chat, name)
