"""Trajectory viewer (`python -m ragjax.rollout.viewer FILE`): an HTML page or coloured text.

What a researcher opens when rewards look wrong: which text the policy wrote (and is trained
on), what the retriever returned, what the environment injected, the queries per turn, the
answer, the stop reason and the reward.

A dump is data, possibly from someone else's run: every field is escaped before it reaches
the page (so a `<script>` in a dump is shown, never run), and the terminal rendering shows
control characters as `\\x1b`-style escapes instead of letting them drive the terminal.

    python -m ragjax.rollout.viewer rollouts.jsonl              # -> rollouts.html, path printed
    python -m ragjax.rollout.viewer rollouts.jsonl --open       # and open it in a browser
    python -m ragjax.rollout.viewer rollouts.jsonl --terminal --rows 0,3
"""

from __future__ import annotations

import argparse
import html
import numbers
import os
import re
import sys
import webbrowser
from typing import Optional, Sequence

from ragjax.rollout.dump import DumpError, read_jsonl

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


def _is_number(x) -> bool:
  return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _span_html(span: dict) -> str:
  label = span["label"]
  title = f"{label} turn {span.get('turn', '')}"
  if "logprob_sum" in span:
    lp = span["logprob_sum"]
    title += f" logprob {lp:.3f}" if _is_number(lp) else f" logprob {lp}"
  cls = ' class="t"' if span.get("trained") else ""
  return (f'<span{cls} style="{_style(label)}" title="{html.escape(title)}">'
          f"{html.escape(str(span['text']))}</span>")


def _fmt(x) -> str:
  """Any dump value as HTML text (quotes too, so it is also safe inside an attribute)."""
  return "—" if x is None else html.escape(str(x), quote=True)


def _doc_ids(turn: dict) -> str:
  ids = turn.get("doc_ids") or []
  return ", ".join(map(str, ids)) if isinstance(ids, (list, tuple)) else str(ids)


def trajectory_html(rec: dict, show_prompt: bool = False) -> str:
  reward = rec.get("reward")
  rcls = "" if not _is_number(reward) else (' class="good"' if reward > 0 else ' class="bad"')
  head = (f'<div class="head"><span><b>row</b> {_fmt(rec["row"])}</span>'
          f'<span><b>group</b> {_fmt(rec["group_id"])}</span>'
          + (f'<span><b>clone of</b> {_fmt(rec["clone_of"])}</span>'
             if rec.get("clone_of") is not None else "")
          + f'<span><b>stop</b> {_fmt(rec["stop_reason"])}</span>'
          f'<span><b>answer</b> {_fmt(rec.get("answer"))}</span>'
          f'<span{rcls}><b>reward</b> {_fmt(reward)}</span>'
          f'<span><b>tokens</b> {_fmt(rec.get("num_tokens"))}</span></div>')
  rows = "".join(
      f"<tr><td>{_fmt(t.get('turn'))}</td><td>{_fmt(t.get('action'))}</td>"
      f"<td>{_fmt(t.get('query'))}</td><td>{_fmt(_doc_ids(t))}</td>"
      f"<td>{'truncated' if t.get('obs_truncated') else ''} {_fmt(t.get('reason') or '')}</td></tr>"
      for t in rec["turns"])
  table = ("<table><tr><th>turn</th><th>action</th><th>query</th><th>documents</th>"
           f"<th>notes</th></tr>{rows}</table>")
  prompt = "".join(_span_html(s) for s in rec["spans"] if s["label"] == "PROMPT")
  body = "".join(_span_html(s) for s in rec["spans"] if s["label"] not in ("PROMPT", "PAD"))
  prompt_block = (f'<details{" open" if show_prompt else ""}><summary>prompt</summary>'
                  f'<div class="text">{prompt}</div></details>')
  return (f'<div class="traj" id="row-{_fmt(rec["row"])}">{head}{table}{prompt_block}'
          f'<div class="text">{body}</div></div>')


def page_html(records: Sequence[dict], title: str = "ragjax trajectories",
              show_prompt: bool = False) -> str:
  legend = "".join(f'<span style="{_style(k)}">{DESCRIPTION[k]}</span>' for k in COLOURS
                   if k != "PAD")
  summary = "".join(
      f'<tr><td><a href="#row-{_fmt(r["row"])}">{_fmt(r["row"])}</a></td>'
      f'<td>{_fmt(r["group_id"])}</td>'
      f'<td>{_fmt(r["stop_reason"])}</td><td>{_fmt(r.get("answer"))}</td>'
      f'<td>{_fmt(r.get("reward"))}</td>'
      f'<td>{sum(1 for t in r["turns"] if t.get("action") == "search")}</td></tr>' for r in records)
  return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
          f"<style>{_CSS}</style></head><body><h2>{html.escape(title)}</h2>"
          f'<div class="legend">{legend} <span style="outline:1px solid #7bbf7b">outlined = '
          f"carries loss</span></div>"
          "<table><tr><th>row</th><th>group</th><th>stop</th><th>answer</th><th>reward</th>"
          f"<th>searches</th></tr>{summary}</table>"
          + "".join(trajectory_html(r, show_prompt) for r in records) + "</body></html>")


# C0 / DEL / C1 controls except newline and tab, and the bidi overrides that reorder what a
# terminal shows ("Trojan Source").
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def visible(text) -> str:
  """`text` with control characters written as escapes (ESC -> `\\x1b`), newlines kept."""
  return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}",
                      str(text))


def terminal_text(records: Sequence[dict], show_prompt: bool = False, color: bool = True) -> str:
  def paint(label, text):
    if not color:
      return f"[{label}]{visible(text)}[/{label}]"
    return f"\x1b[{COLOURS.get(label, COLOURS['PAD'])[2]}m{visible(text)}\x1b[0m"

  out = []
  if color:
    out.append("  ".join(paint(k, DESCRIPTION[k]) for k in COLOURS if k != "PAD"))
  for r in records:
    out.append(visible(f"=== row {r['row']}  group {r['group_id']}  stop {r['stop_reason']}  "
                       f"answer {r.get('answer')!r}  reward {r.get('reward')}"
                       + (f"  clone of {r['clone_of']}" if r.get("clone_of") is not None else "")))
    for t in r["turns"]:
      if t.get("action") == "search":
        out.append(visible(f"  turn {t.get('turn')}: search {t.get('query')!r} -> {_doc_ids(t)}"))
    out.append("".join(paint(s["label"], s["text"]) for s in r["spans"]
                       if s["label"] != "PAD" and (show_prompt or s["label"] != "PROMPT")))
  return "\n".join(out) + "\n"


def select(records: Sequence[dict], rows: Optional[Sequence[int]]) -> list[dict]:
  if rows is None:
    return list(records)
  by_row = {}                     # a row that is not a number (another's dump) is never asked for
  for r in records:
    if isinstance(r["row"], int) and not isinstance(r["row"], bool):
      by_row.setdefault(r["row"], r)
  missing = [i for i in rows if i not in by_row]
  if missing:
    raise KeyError(f"rows {missing} are not in the dump (it has rows {sorted(by_row)[:20]}...)")
  return [by_row[i] for i in rows]


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(prog="python -m ragjax.rollout.viewer", description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("file", help="a JSONL trajectory dump (ragjax.rollout.dump)")
  ap.add_argument("--html", help="where to write the page (default: FILE with .html)")
  ap.add_argument("--terminal", action="store_true", help="print coloured text instead")
  ap.add_argument("--no-color", action="store_true", help="with --terminal: [LABEL] markers")
  ap.add_argument("--open", action="store_true", help="open the page in a web browser")
  ap.add_argument("--rows", help="comma-separated row numbers to show")
  ap.add_argument("--show-prompt", action="store_true")
  args = ap.parse_args(argv)
  try:
    records = read_jsonl(args.file)
    if not records:
      raise DumpError(f"{args.file}: no trajectory records (an empty dump)")
    rows = None if not args.rows else [int(x) for x in args.rows.split(",") if x.strip()]
    records = select(records, rows)
  except (DumpError, KeyError, ValueError, IsADirectoryError, PermissionError) as e:
    print(f"error: {visible(e.args[0] if isinstance(e, KeyError) and e.args else e)}",
          file=sys.stderr)
    return 2
  if args.terminal:
    sys.stdout.write(terminal_text(records, args.show_prompt, color=not args.no_color))
    return 0
  out = args.html or os.path.splitext(args.file)[0] + ".html"
  page = page_html(records, title=os.path.basename(args.file), show_prompt=args.show_prompt)
  try:
    with open(out, "w", encoding="utf-8") as f:
      f.write(page)
  except OSError as e:             # a missing or read-only directory, a full disk
    print(f"error: cannot write the page {visible(out)}: {e.strerror}", file=sys.stderr)
    return 2
  print(out)
  if args.open:
    webbrowser.open("file://" + os.path.abspath(out))
  return 0


if __name__ == "__main__":
  sys.exit(main())
