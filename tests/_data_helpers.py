"""Shared helpers for the data tests: where the real files are and what their README says."""

from __future__ import annotations

import glob
import os
import re

from conftest import SHARED_DATA

README = os.path.join(SHARED_DATA, "README.md")

# Builder name -> the shared files it imports (relative to SHARED_DATA; globs allowed).
SHARED_FILES = {
    "ragjax_flashrag": ["flashrag_format/*.jsonl"],
    "ragjax_verl": ["searchr1_verl_parquet/*.parquet"],
    "ragjax_hotpotqa": ["hotpotqa/derived_hotpot_dev_distractor_union_1668.json",
                        "hotpotqa/rpt_hf_validation_sample_*.jsonl",
                        "hotpotqa/benchfortir_hotpot_dev_distractor_500.jsonl",
                        "hotpotqa/ircot_hotpotqa_dev_subsampled_500.jsonl",
                        "hotpotqa/migres_hotpot_dev_distractor_200.jsonl"],
    "ragjax_twowiki": ["2wikimultihopqa/derived_2wiki_dev_with_context_164.json",
                       "2wikimultihopqa/migres_2wiki_200.jsonl"],
    "ragjax_musique": ["musique/hipporag_musique_train_100.json",
                       "musique/lag_musique_ans_dev_2417.json"],
    "ragjax_multiple_choice": ["ur2_eval/mmlupro.jsonl", "ur2_eval/mmlupro_med.jsonl",
                               "ur2_eval/medqa_500_5options.jsonl"],
    "ragjax_math": ["ur2_eval/math500.jsonl", "ur2_eval/minervamath.jsonl", "gsm8k/gsm8k_test.jsonl"],
}


def readme_counts() -> dict[str, int]:
  """{relative path: record count} from the tables in the shared data README."""
  counts = {}
  with open(README, encoding="utf-8") as f:
    for line in f:
      cells = [c.strip() for c in line.strip().strip("|").split("|")]
      if len(cells) < 3 or not cells[0].startswith("`"):
        continue
      path = cells[0].strip("`")
      for cell in cells[1:]:
        m = re.match(r"^(\d+)\b", cell)
        if m:
          counts[path] = int(m.group(1))
          break
  return counts


def shared_files(builder: str) -> list[str]:
  """Existing files for a builder, relative to SHARED_DATA, sorted."""
  out = []
  for pattern in SHARED_FILES[builder]:
    out += [os.path.relpath(p, SHARED_DATA) for p in glob.glob(os.path.join(SHARED_DATA, pattern))]
  return sorted(set(out))


def split_name(rel_path: str) -> str:
  """A TFDS split name (\\w+) for one file."""
  return re.sub(r"\W+", "_", os.path.splitext(os.path.basename(rel_path))[0])
