"""`python -m ragjax.rollout.view FILE`: writes FILE's HTML viewer (or prints it in colour).

    python -m ragjax.rollout.view rollouts.jsonl              # -> rollouts.html, path printed
    python -m ragjax.rollout.view rollouts.jsonl --open       # and open it in a browser
    python -m ragjax.rollout.view rollouts.jsonl --terminal --rows 0,3
"""

from __future__ import annotations

import argparse
import os
import sys
import webbrowser

from ragjax.rollout.dump import DumpError, read_jsonl
from ragjax.rollout.viewer import page_html, select, terminal_text, visible


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(prog="python -m ragjax.rollout.view", description=__doc__,
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
    print(f"error: {visible(e)}", file=sys.stderr)
    return 2
  if args.terminal:
    sys.stdout.write(terminal_text(records, args.show_prompt, color=not args.no_color))
    return 0
  out = args.html or os.path.splitext(args.file)[0] + ".html"
  with open(out, "w", encoding="utf-8") as f:
    f.write(page_html(records, title=os.path.basename(args.file), show_prompt=args.show_prompt))
  print(out)
  if args.open:
    webbrowser.open("file://" + os.path.abspath(out))
  return 0


if __name__ == "__main__":
  sys.exit(main())
