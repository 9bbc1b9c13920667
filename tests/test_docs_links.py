"""Every relative markdown link in README.md, BENCHMARKS.md and docs/**/*.md points to a file
or folder that exists, and a `#anchor` into a .md file names one of its headings (GitHub's
rule: lowercase, punctuation dropped, spaces to '-', '-1', '-2' for repeats).  Reads text only."""
import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def _pages():
  pages = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "BENCHMARKS.md")]
  return pages + sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))


def _prose(path):
  """The file's lines outside fenced code blocks."""
  out, fenced = [], False
  for line in open(path, encoding="utf-8"):
    if FENCE.match(line):
      fenced = not fenced
      continue
    if not fenced:
      out.append(line.rstrip("\n"))
  return out


def slug(heading):
  s = heading.strip().lower()
  s = re.sub(r"<[^>]+>", "", s)
  s = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", s)          # a link in a heading: its text
  s = re.sub(r"[^\w\- ]", "", s)                         # punctuation (keeps letters, _, -)
  return s.replace(" ", "-")


_ANCHORS = {}


def anchors(path):
  if path not in _ANCHORS:
    seen, found = {}, set()
    for line in _prose(path):
      m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
      if not m:
        continue
      base = slug(m.group(1))
      n = seen.get(base, 0)
      seen[base] = n + 1
      found.add(base if n == 0 else f"{base}-{n}")
    _ANCHORS[path] = found
  return _ANCHORS[path]


def test_slug_follows_github():
  assert slug("Multi-turn rollout: engine vs re-prefill vs transformers `generate`") == \
      "multi-turn-rollout-engine-vs-re-prefill-vs-transformers-generate"
  assert slug("evaluation harness (questions/s, `python -m ragjax.evaluate --suite`)") == \
      "evaluation-harness-questionss-python--m-ragjaxevaluate---suite"
  assert slug("UR²: the curriculum on a hard tail") == "ur²-the-curriculum-on-a-hard-tail"


def test_relative_links_and_anchors_resolve():
  broken = []
  for page in _pages():
    for line in _prose(page):
      line = re.sub(r"`[^`]*`", "", line)                 # inline code is not a link
      for target in LINK.findall(line):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
          continue
        path, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        rel = os.path.relpath(page, ROOT)
        if not os.path.exists(dest):
          broken.append(f"{rel}: {target} (no such file)")
        elif anchor and dest.endswith(".md") and anchor.lower() not in anchors(dest):
          broken.append(f"{rel}: {target} (no such heading)")
  assert not broken, "\n".join(broken)
