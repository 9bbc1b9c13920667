"""A protocol bound to a tokenizer: prompt ids, observation segments, and their tokenisation.

Decides once whether the model is chat-formatted (the tokenizer has a chat template) or a base
model (plain text), and for protocols whose observations are user messages (ReZero) reads the
framing off the chat template.
"""

from __future__ import annotations

from typing import Optional, Sequence

from ragjax.rollout.chat import has_chat_template, render_chat, user_turn_framing
from ragjax.rollout.labels import Source
from ragjax.rollout.protocols.base import PromptInput, Protocol, as_prompt_input
from ragjax.rollout.segments import Segment, encode_text, tokenize_segments


class Renderer:
  def __init__(self, protocol: Protocol, tokenizer, chat: Optional[bool] = None,
               chat_template_kwargs: Optional[dict] = None):
    self.protocol, self.tokenizer = protocol, tokenizer
    self.chat = has_chat_template(tokenizer) if chat is None else bool(chat)
    self.template_kwargs = dict(chat_template_kwargs or {})
    self.framing = None
    if self.chat and protocol.observation_role == "user":
      system = protocol.system_message(PromptInput("q"))
      self.framing = user_turn_framing(tokenizer, system=system, **self.template_kwargs)

  def prompt_text(self, prompt) -> str:
    inp = as_prompt_input(prompt)
    if self.chat:
      return render_chat(self.tokenizer, self.protocol.messages(inp), **self.template_kwargs)
    return self.protocol.plain_prompt(inp)

  def prompt_ids(self, prompt) -> list[int]:
    text = self.prompt_text(prompt)
    if self.chat:                   # the template wrote any BOS it wants
      return encode_text(self.tokenizer, text)
    return list(self.tokenizer(text, add_special_tokens=True)["input_ids"])

  def wrap_observation(self, content: Sequence[Segment], end_token_text: Optional[str]):
    """User-role observations get the chat framing (ENV) around them."""
    if self.framing is None:
      return list(content)
    close = self.framing.close_after(end_token_text)
    head = [Segment(close, Source.ENV)] if close else []
    return head + list(content) + [Segment(self.framing.open, Source.ENV)]

  def tokenize(self, segments: Sequence[Segment]):
    return tokenize_segments(self.tokenizer, segments)
