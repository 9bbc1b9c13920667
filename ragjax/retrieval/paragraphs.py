"""Paragraphs and gold titles of multi-hop QA records: one function per source format.

The corpus reader (`ragjax.retrieval.corpus_reader`), recall (`ragjax.retrieval.recall`) and the
dataset importers (`ragjax.data.hotpotqa`, `twowiki`, `musique`) all read paragraphs through
here, so a paragraph gets the same text whichever of them reads it.

- HotpotQA / 2Wiki official: `context: [[title, [sentence, ...]]]`, `supporting_facts: [[title, i]]`
- Hugging Face `hotpot_qa`: `context: {title: [..], sentences: [[..]]}`,
  `supporting_facts: {title: [..], sent_id: [..]}`
- IRCoT processed: `contexts: [{title, paragraph_text, is_supporting}]`
- MuSiQue: `paragraphs: [{title, paragraph_text, is_supporting}]`; gold titles also in each
  hop's `question_decomposition[].document_id` ('Title_0')
- FlashRAG question files: the HotpotQA fields under `metadata` (ragjax's own also carry
  `metadata.supporting_titles`)

Texts keep the source's spacing (HotpotQA sentences are concatenated as its official tools do,
2Wiki's joined with a space), which is what the shared 31k-passage corpus holds; a reader that
wants whitespace-normalised text normalises it itself.  Malformed fields raise `RecordError`.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Optional, Sequence

from ragjax.retrieval.records import RecordError, require_str

_DOUBLE_SPACE = re.compile(r"(?<=\S)  (?=\S)")
_DOC_SUFFIX = re.compile(r"_\d+$")


@dataclasses.dataclass(frozen=True)
class Paragraph:
  title: str
  text: str
  supporting: bool = False     # flagged by the file itself (IRCoT, MuSiQue); else see gold titles


def join_sentences(sentences: Sequence[str], sep: Optional[str] = None) -> str:
  """HotpotQA sentences carry their own leading space and are concatenated (sep=''); 2Wiki's do
  not (sep=' ').  sep=None tells them apart by that leading space, for readers that do not
  know which dataset a file came from."""
  if sep is None:
    sep = "" if any(s[:1].isspace() for s in sentences[1:]) else " "
  if sep:
    return sep.join(s.strip() for s in sentences if s.strip())
  return "".join(sentences).strip()


def official_context(ctx: Any, where: str, sep: Optional[str] = None,
                     field: str = "context") -> list[Paragraph]:
  """HotpotQA / 2Wiki `[[title, [sentence, ...]], ...]`."""
  if not isinstance(ctx, list):
    raise RecordError(where, field, f"expected a list of [title, sentences], got {type(ctx).__name__}")
  out = []
  for i, item in enumerate(ctx):
    if not (isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], str)
            and isinstance(item[1], list) and all(isinstance(s, str) for s in item[1])):
      raise RecordError(where, f"{field}[{i}]", "expected [title, [sentence, ...]]")
    out.append(Paragraph(item[0], join_sentences(item[1], sep)))
  return out


def hf_context(ctx: dict, where: str, sep: Optional[str] = None,
               field: str = "context") -> list[Paragraph]:
  """Hugging Face `hotpot_qa`: `{title: [..], sentences: [[..], ..]}`."""
  titles, sents = ctx.get("title"), ctx.get("sentences")
  if not isinstance(titles, list) or not isinstance(sents, list) or len(titles) != len(sents):
    raise RecordError(where, field, "expected {title: [..], sentences: [[..]]} of equal length")
  for i, (t, s) in enumerate(zip(titles, sents)):
    if not isinstance(t, str) or not isinstance(s, list) or not all(isinstance(x, str) for x in s):
      raise RecordError(where, f"{field}.sentences[{i}]", "expected a title and a list of sentences")
  return [Paragraph(t, join_sentences(s, sep)) for t, s in zip(titles, sents)]


def hotpot_context(ctx: Any, where: str, sep: Optional[str] = None,
                   field: str = "context") -> list[Paragraph]:
  """Either HotpotQA layout (a dict is Hugging Face's); no context gives []."""
  if ctx is None:
    return []
  if isinstance(ctx, dict):
    return hf_context(ctx, where, sep, field)
  return official_context(ctx, where, sep, field)


def flagged_paragraphs(items: Any, where: str, field: str) -> list[Paragraph]:
  """`[{title, paragraph_text, is_supporting}]`, the item layout MuSiQue and IRCoT share; None
  gives []."""
  if items is None:
    return []
  if not isinstance(items, list):
    raise RecordError(where, field, f"expected a list, got {type(items).__name__}")
  out = []
  for i, p in enumerate(items):
    try:
      title = require_str(p, "title", where, allow_empty=True)
      text = require_str(p, "paragraph_text", where, allow_empty=True)
    except RecordError as e:        # name the item, e.g. field 'paragraphs[3].title'
      raise RecordError(where, f"{field}[{i}]" + (f".{e.field}" if e.field else ""), e.problem) from None
    out.append(Paragraph(title, text, bool(p.get("is_supporting"))))
  return out


def musique_paragraphs(paragraphs: Any, where: str, field: str = "paragraphs") -> list[Paragraph]:
  """MuSiQue's `paragraphs`, text as written."""
  return flagged_paragraphs(paragraphs, where, field)


def ircot_contexts(contexts: Any, where: str, field: str = "contexts") -> list[Paragraph]:
  """IRCoT's `contexts`.  IRCoT joined Hotpot's sentences (which keep their leading space) with
  another space; the doubled spaces are undone."""
  return [dataclasses.replace(p, text=_DOUBLE_SPACE.sub(" ", p.text).strip())
          for p in flagged_paragraphs(contexts, where, field)]


def supporting_fact_titles(sf: Any, where: str, field: str = "supporting_facts") -> tuple[str, ...]:
  """Titles named by HotpotQA / 2Wiki `supporting_facts`, list or Hugging Face dict form."""
  if sf is None:
    return ()
  if isinstance(sf, dict):
    titles = sf.get("title")
    if not isinstance(titles, list) or not all(isinstance(t, str) for t in titles):
      raise RecordError(where, f"{field}.title", "expected a list of titles")
  elif isinstance(sf, list):
    titles = []
    for i, item in enumerate(sf):
      if not (isinstance(item, (list, tuple)) and item and isinstance(item[0], str)):
        raise RecordError(where, f"{field}[{i}]", "expected [title, sentence_index]")
      titles.append(item[0])
  else:
    raise RecordError(where, field, f"unexpected type {type(sf).__name__}")
  return tuple(dict.fromkeys(titles))


def decomposition_titles(decomp: Any, where: str,
                         field: str = "question_decomposition") -> tuple[str, ...]:
  """MuSiQue gold titles from each hop's `document_id` ('Title_12' -> 'Title')."""
  if decomp is None:
    return ()
  if not isinstance(decomp, list):
    raise RecordError(where, field, "expected a list of hops")
  docs = (hop.get("document_id") if isinstance(hop, dict) else None for hop in decomp)
  return tuple(dict.fromkeys(_DOC_SUFFIX.sub("", d) for d in docs if isinstance(d, str) and d))


def record_paragraphs(rec: dict, where: str) -> Optional[list[Paragraph]]:
  """The paragraphs of a QA record in any format above, or None when it is not a QA record
  (a corpus record)."""
  meta = rec.get("metadata") if isinstance(rec.get("metadata"), dict) else {}
  if rec.get("context") is not None:
    return hotpot_context(rec["context"], where)
  if meta.get("context") is not None:
    return hotpot_context(meta["context"], where, field="metadata.context")
  if "contexts" in rec:
    return ircot_contexts(rec["contexts"], where)
  if "paragraphs" in rec:
    return musique_paragraphs(rec["paragraphs"], where)
  return None


def record_gold_titles(rec: dict, where: str) -> tuple[str, ...]:
  """Titles of the paragraphs that answer a QA record (empty when the file names none)."""
  meta = rec.get("metadata") if isinstance(rec.get("metadata"), dict) else {}
  for sf, field in ((rec.get("supporting_facts"), "supporting_facts"),
                    (meta.get("supporting_facts"), "metadata.supporting_facts")):
    if sf is not None:
      return supporting_fact_titles(sf, where, field)
  if isinstance(meta.get("supporting_titles"), list):
    return tuple(dict.fromkeys(t for t in meta["supporting_titles"] if isinstance(t, str)))
  if rec.get("paragraphs") is not None or rec.get("contexts") is not None:
    paras = record_paragraphs(rec, where) or []
    return tuple(dict.fromkeys(p.title for p in paras if p.supporting))
  return decomposition_titles(rec.get("question_decomposition"), where)
