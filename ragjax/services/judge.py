"""Ask a `ChatModel` with a named template and parse the replies, counting what failed to parse.

    judge = TemplateJudge(chat, "r3_relevance")
    scores = judge([dict(problem=p, current_analysis=a, current_query=q, retrieved_docs=d), ...])
    judge.unparsed, judge.replies       # for the trainer's metrics

Sampling settings default to the template's (the paper's code settings); any can be overridden
(e.g. `temperature=0.0` for a deterministic local judge).  `__call__` returns the parsed values;
`run` returns the full `Parsed` records.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence, Union

from ragjax.services.chat_model import ChatModel
from ragjax.services.templates import Parsed, Template, get_template


class TemplateJudge:
  """See the module docstring."""

  def __init__(self, chat: ChatModel, template: Union[str, Template], *,
               max_tokens: Optional[int] = None, temperature: Optional[float] = None,
               top_p: Optional[float] = None, stop: Optional[Sequence[str]] = None):
    self.chat = chat
    self.template = get_template(template) if isinstance(template, str) else template
    if self.template.parse is None:
      raise ValueError(f"template {self.template.name!r} has no reply parser")
    t = self.template
    self.max_tokens = t.max_tokens if max_tokens is None else max_tokens
    self.temperature = t.temperature if temperature is None else temperature
    self.top_p = t.top_p if top_p is None else top_p
    self.stop = stop
    self.replies = self.unparsed = self.fallbacks = 0

  def run(self, rows: Sequence[Mapping[str, str]]) -> list[Parsed]:
    convs = [self.template.render(**row) for row in rows]
    if not convs:
      return []
    texts = self.chat.complete(convs, max_tokens=self.max_tokens, temperature=self.temperature,
                               stop=self.stop, top_p=self.top_p)
    out = [self.template.parse(t) for t in texts]
    self.replies += len(out)
    self.unparsed += sum(not p.ok for p in out)
    self.fallbacks += sum(p.fallback for p in out)
    return out

  def __call__(self, rows: Sequence[Mapping[str, str]]) -> list:
    return [p.value for p in self.run(rows)]

  def stats(self) -> dict:
    return {"replies": self.replies, "unparsed": self.unparsed, "fallbacks": self.fallbacks}
