"""PNG plots of training curves from the metrics JSONL."""

from __future__ import annotations

import json
import os
from typing import Sequence


def read_metrics(path: str) -> list[dict]:
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def plot_curves(records: Sequence[dict], keys: Sequence[str], out_dir: str,
                x_key: str = "step") -> list[str]:
  """One PNG per key that appears in the records; returns the written paths."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  os.makedirs(out_dir, exist_ok=True)
  written = []
  for key in keys:
    pts = [(r[x_key], r[key]) for r in records if key in r and x_key in r]
    if not pts:
      continue
    fig, ax = plt.subplots(figsize=(5, 3.2), dpi=100)
    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=2)
    ax.set_xlabel(x_key)
    ax.set_ylabel(key)
    ax.set_title(key)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = os.path.join(out_dir, key.replace("/", "_") + ".png")
    fig.savefig(path)
    plt.close(fig)
    written.append(path)
  return written
