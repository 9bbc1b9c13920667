"""Chat-template helpers: prompts for instruct models and user-role observations (ReZero).

Instruct models get their own chat template (`tokenizer.apply_chat_template`); base models get
plain text.  For protocols whose observations are a new user message, the framing between an
assistant message and the next one is read off the template itself with sentinels, so any
template (ChatML, Llama-3, ...) works without hard-coding its markers.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

_A = "\x00RAGJAX_ASSISTANT\x00"
_U = "\x00RAGJAX_USER\x00"


def has_chat_template(tokenizer) -> bool:
  return bool(getattr(tokenizer, "chat_template", None))


def render_chat(tokenizer, messages: Sequence[dict], **template_kwargs) -> str:
  """The prompt text for `messages`, ending with the assistant generation prompt."""
  if not has_chat_template(tokenizer):
    raise ValueError("tokenizer has no chat_template; use plain prompts (chat=False) for base models")
  return tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True,
                                       **template_kwargs)


@dataclasses.dataclass(frozen=True)
class UserTurnFraming:
  """Text around a user message inserted after an assistant message.

  `close` ends the assistant message and opens the user one; `open` closes the user message and
  starts the next assistant message (the generation prompt).
  """
  close: str
  open: str

  def close_after(self, end_token_text: Optional[str]) -> str:
    """`close` minus the end-of-turn token the policy itself generated (that one stays POLICY)."""
    if end_token_text and self.close.startswith(end_token_text):
      return self.close[len(end_token_text):]
    return self.close


def user_turn_framing(tokenizer, system: Optional[str] = None, **template_kwargs) -> UserTurnFraming:
  head = [{"role": "system", "content": system}] if system is not None else []
  msgs = head + [{"role": "user", "content": "q"}, {"role": "assistant", "content": _A},
                 {"role": "user", "content": _U}]
  text = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True,
                                       **template_kwargs)
  a, u = text.find(_A), text.find(_U)
  if a < 0 or u < a:
    raise ValueError("chat template does not render assistant and user messages in order")
  return UserTurnFraming(close=text[a + len(_A):u], open=text[u + len(_U):])
