"""Trajectory viewer: an HTML page and a terminal rendering of a dump, tokens coloured by source.

What a researcher opens when rewards look wrong: which text the policy wrote (and is trained
on), what the retriever returned, what the environment injected, the queries per turn, the
answer, the stop reason and the reward.
"""

from __future__ import annotations

import html
from typing import Optional, Sequence

COLOURS = {  # label -> (css background, css text colour, ANSI code)
    "PROMPT": ("#eeeeee", "#666666", "2"),
    "POLICY": ("#e3f6e3", "#0b3d0b", "32"),
    "RETRIEVED": ("#dde9ff", "#0b2a66", "36"),
    "INJECTED": ("#ffe2c2", "#6b3000", "35"),
    "ENV": ("#fff6bf", "#5c4d00", "33"),
    "PAD": ("#ffffff", "#bbbbbb", "2"),
}
DESCRIPTION = {
    "PROMPT": "prompt", "POLICY": "policy (trained)", "RETRIEVED": "retrieved (masked)",
    "INJECTED": "injected", "ENV": "environment (masked)", "PAD": "padding",
}

_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;max-width:1100px}
.traj{border:1px solid #ccc;border-radius:6px;margin:1.2em 0;padding:.6em 1em}
.head{display:flex;gap:1.2em;flex-wrap:wrap;font-size:.95em}
.head b{color:#333}
.text{white-space:pre-wrap;font-family:ui-monospace,monospace;font-size:.85em;line-height:1.45;
  border-top:1px dashed #ccc;margin-top:.5em;padding-top:.5em}
.text span{border-radius:2px}
.text span.t{outline:1px solid #7bbf7b}
table{border-collapse:collapse;font-size:.85em;margin-top:.4em}
td,th{border:1px solid #ddd;padding:2px 6px;text-align:left;vertical-align:top}
.legend span{padding:2px 6px;margin-right:.4em;border-radius:3px;font-size:.85em}
.bad{color:#a00000}.good{color:#006000}
"""


def _style(label: str) -> str:
  bg, fg, _ = COLOURS.get(label, COLOURS["PAD"])
  return f"background:{bg};color:{fg}"


def _span_html(span: dict) -> str:
  label = span["label"]
  title = f"{label} turn {span.get('turn', '')}"
  if "logprob_sum" in span:
    title += f" logprob {span['logprob_sum']:.3f}"
  cls = ' class="t"' if span.get("trained") else ""
  return (f'<span{cls} style="{_style(label)}" title="{html.escape(title)}">'
          f"{html.escape(span['text'])}</span>")


def _fmt(x) -> str:
  return "—" if x is None else html.escape(str(x))


def trajectory_html(rec: dict, show_prompt: bool = False) -> str:
  reward = rec.get("reward")
  rcls = "" if reward is None else (' class="good"' if reward > 0 else ' class="bad"')
  head = (f'<div class="head"><span><b>row</b> {rec["row"]}</span>'
          f'<span><b>group</b> {rec["group_id"]}</span>'
          + (f'<span><b>clone of</b> {rec["clone_of"]}</span>' if rec.get("clone_of") is not None
             else "")
          + f'<span><b>stop</b> {_fmt(rec["stop_reason"])}</span>'
          f'<span><b>answer</b> {_fmt(rec.get("answer"))}</span>'
          f'<span{rcls}><b>reward</b> {_fmt(reward)}</span>'
          f'<span><b>tokens</b> {_fmt(rec.get("num_tokens"))}</span></div>')
  rows = "".join(
      f"<tr><td>{t['turn']}</td><td>{_fmt(t['action'])}</td><td>{_fmt(t.get('query'))}</td>"
      f"<td>{_fmt(', '.join(t.get('doc_ids') or []))}</td>"
      f"<td>{'truncated' if t.get('obs_truncated') else ''} {_fmt(t.get('reason') or '')}</td></tr>"
      for t in rec["turns"])
  table = ("<table><tr><th>turn</th><th>action</th><th>query</th><th>documents</th>"
           f"<th>notes</th></tr>{rows}</table>")
  prompt = "".join(_span_html(s) for s in rec["spans"] if s["label"] == "PROMPT")
  body = "".join(_span_html(s) for s in rec["spans"] if s["label"] not in ("PROMPT", "PAD"))
  prompt_block = (f'<details{" open" if show_prompt else ""}><summary>prompt</summary>'
                  f'<div class="text">{prompt}</div></details>')
  return (f'<div class="traj" id="row-{rec["row"]}">{head}{table}{prompt_block}'
          f'<div class="text">{body}</div></div>')


def page_html(records: Sequence[dict], title: str = "ragjax trajectories",
              show_prompt: bool = False) -> str:
  legend = "".join(f'<span style="{_style(k)}">{DESCRIPTION[k]}</span>' for k in COLOURS
                   if k != "PAD")
  summary = "".join(
      f'<tr><td><a href="#row-{r["row"]}">{r["row"]}</a></td><td>{r["group_id"]}</td>'
      f'<td>{_fmt(r["stop_reason"])}</td><td>{_fmt(r.get("answer"))}</td>'
      f'<td>{_fmt(r.get("reward"))}</td>'
      f'<td>{sum(1 for t in r["turns"] if t["action"] == "search")}</td></tr>' for r in records)
  return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
          f"<style>{_CSS}</style></head><body><h2>{html.escape(title)}</h2>"
          f'<div class="legend">{legend} <span style="outline:1px solid #7bbf7b">outlined = '
          f"carries loss</span></div>"
          "<table><tr><th>row</th><th>group</th><th>stop</th><th>answer</th><th>reward</th>"
          f"<th>searches</th></tr>{summary}</table>"
          + "".join(trajectory_html(r, show_prompt) for r in records) + "</body></html>")


def terminal_text(records: Sequence[dict], show_prompt: bool = False, color: bool = True) -> str:
  def paint(label, text):
    if not color:
      return f"[{label}]{text}[/{label}]"
    return f"\x1b[{COLOURS.get(label, COLOURS['PAD'])[2]}m{text}\x1b[0m"

  out = []
  if color:
    out.append("  ".join(paint(k, DESCRIPTION[k]) for k in COLOURS if k != "PAD"))
  for r in records:
    out.append(f"=== row {r['row']}  group {r['group_id']}  stop {r['stop_reason']}  "
               f"answer {r.get('answer')!r}  reward {r.get('reward')}"
               + (f"  clone of {r['clone_of']}" if r.get("clone_of") is not None else ""))
    for t in r["turns"]:
      if t["action"] == "search":
        out.append(f"  turn {t['turn']}: search {t['query']!r} -> {', '.join(t['doc_ids'])}")
    out.append("".join(paint(s["label"], s["text"]) for s in r["spans"]
                       if s["label"] != "PAD" and (show_prompt or s["label"] != "PROMPT")))
  return "\n".join(out) + "\n"


def select(records: Sequence[dict], rows: Optional[Sequence[int]]) -> list[dict]:
  if rows is None:
    return list(records)
  by_row = {r["row"]: r for r in records}
  missing = [i for i in rows if i not in by_row]
  if missing:
    raise KeyError(f"rows {missing} are not in the dump (it has rows {sorted(by_row)[:20]}...)")
  return [by_row[i] for i in rows]
