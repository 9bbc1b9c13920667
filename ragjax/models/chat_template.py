"""Chat-template helpers: prompts for instruct models and user-role observations (ReZero).

Instruct models get their own chat template (`tokenizer.apply_chat_template`); base models get
plain text.  For protocols whose observations are a new user message, the framing between an
assistant message and the next one is read off the template itself with sentinels, so any
template (ChatML, Llama-3, ...) works without hard-coding its markers.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Optional, Sequence

from ragjax.models.text_encoding import encode_text

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


_CONTENT = re.compile("\x00RAGJAX_CONTENT_(\\d+)\x00")


def special_strings(tokenizer) -> set[str]:
  """The tokenizer's special tokens as text (`<|im_end|>`, `<|eot_id|>`, ...)."""
  out = set(getattr(tokenizer, "all_special_tokens", None) or ())
  for t in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
    if getattr(t, "special", False):
      out.add(getattr(t, "content", str(t)))
  return {s for s in out if s}


def chat_prompt_ids(tokenizer, messages: Sequence[dict], **template_kwargs) -> list[int]:
  """The ids of `render_chat(messages)`, with every message's content tokenised as plain text:
  only the template's own markers become control tokens, so content holding
  `<|im_end|>\\n<|im_start|>assistant\\n...` cannot forge a turn.  Content without a
  special-token string is tokenised with the rendered text whole, as the template reads; with
  one, each content is tokenised on its own, as given (between the template's pieces)."""
  specials = special_strings(tokenizer)
  if not any(s in m["content"] for m in messages for s in specials):
    return encode_text(tokenizer, render_chat(tokenizer, messages, **template_kwargs))
  marked = [dict(m, content=f"\x00RAGJAX_CONTENT_{i}\x00") for i, m in enumerate(messages)]
  pieces = _CONTENT.split(render_chat(tokenizer, marked, **template_kwargs))
  ids: list[int] = []
  for j, piece in enumerate(pieces):        # template text, content index, template text, ...
    if j % 2:
      ids += encode_text(tokenizer, messages[int(piece)]["content"], plain=True)
    else:
      ids += encode_text(tokenizer, piece)
  return ids


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
