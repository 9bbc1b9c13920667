"""A protocol bound to a tokenizer: prompt ids, observation segments, and their tokenisation.

Decides once whether the model is chat-formatted (the tokenizer has a chat template) or a base
model (plain text), and for protocols whose observations are user messages (ReZero) reads the
framing off the chat template.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from ragjax.models.chat_template import has_chat_template, render_chat, user_turn_framing
from ragjax.rollout.labels import Source
from ragjax.rollout.protocols.base import PromptInput, Protocol, as_prompt_input
from ragjax.models.text_encoding import encode_text, encode_texts
from ragjax.rollout.segments import Segment, tokenize_segments


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
    self.known: dict = {}           # (text, plain) -> ids of the last `prefetch`

  def prompt_text(self, prompt) -> str:
    inp = as_prompt_input(prompt)
    if self.chat:
      return render_chat(self.tokenizer, self.protocol.messages(inp), **self.template_kwargs)
    return self.protocol.plain_prompt(inp)

  def prompt_ids(self, prompt) -> list[int]:
    """The prompt's ids.  The question and options are data: a special-token string inside
    them is tokenised as plain text, never as the template's control token."""
    inp = as_prompt_input(prompt)
    data = [inp.question, *inp.options]
    specials = [t for t in getattr(self.tokenizer, "all_special_tokens", ()) if t]
    if any(s in d for d in data for s in specials):
      return self.context_ids(inp)
    text = self.prompt_text(inp)
    if self.chat:                   # the template wrote any BOS it wants
      return encode_text(self.tokenizer, text)
    return list(self.tokenizer(text, add_special_tokens=True)["input_ids"])

  def context_ids(self, prompt, history: Sequence[Segment] = ()) -> list[int]:
    """The ids of the prompt with `history` segments right after its question: a restart
    context (`Protocol.context == "restart"`: the earlier turns live in the user message; all
    of it is prompt).  The template's text is tokenised with its special tokens, the question,
    options and plain segments (documents, earlier turns) as text, so no data string becomes a
    control token."""
    inp = as_prompt_input(prompt)
    data = [inp.question, *inp.options]
    marks = [f"\x00RAGJAX_DATA_{i}\x00" for i in range(len(data))]
    masked = dataclasses.replace(inp, question=marks[0], options=tuple(marks[1:]))
    text = self.prompt_text(masked)
    ids, rest = [], text
    for i, (mark, value) in enumerate(zip(marks, data)):
      head, sep, rest = rest.partition(mark)
      if not sep:
        raise ValueError(f"{self.protocol.name}: the prompt does not contain its question verbatim")
      segs = [Segment(head, Source.PROMPT), Segment(value, Source.PROMPT, plain=True)]
      ids += tokenize_segments(self.tokenizer, segs + (list(history) if i == 0 else []))[0]
    ids += encode_text(self.tokenizer, rest)
    if not self.chat:              # the BOS / EOS the tokenizer adds around plain prompts
      with_special = self.tokenizer("a", add_special_tokens=True)["input_ids"]
      core = self.tokenizer("a", add_special_tokens=False)["input_ids"]
      start = with_special.index(core[0]) if core and core[0] in with_special else 0
      ids = with_special[:start] + ids + with_special[start + len(core):]
    return ids

  def wrap_observation(self, content: Sequence[Segment], end_token_text: Optional[str]):
    """User-role observations get the chat framing (ENV) around them."""
    if self.framing is None:
      return list(content)
    close = self.framing.close_after(end_token_text)
    head = [Segment(close, Source.ENV)] if close else []
    return head + list(content) + [Segment(self.framing.open, Source.ENV)]

  def prefetch(self, segment_lists: Sequence[Sequence[Segment]]) -> None:
    """Tokenise every segment of these lists now, in one batched call per kind (plain text or
    not), so that `tokenize` of each list reads its ids (one turn's observations at a time: the
    engine's rows whose searches returned).  The ids equal `tokenize`'s own; a segment it was
    not given is tokenised there as before."""
    keys = {(s.text, s.is_plain) for segs in segment_lists for s in segs
            if isinstance(s, Segment)}
    self.known = {}
    for plain in (False, True):
      texts = [t for t, p in keys if p == plain]
      self.known.update(((t, plain), ids) for t, ids in
                        zip(texts, encode_texts(self.tokenizer, texts, plain=plain)))

  def tokenize(self, segments: Sequence[Segment]):
    return tokenize_segments(self.tokenizer, segments, self.known)
