"""The synthetic world on disk, ready for a recipe: question splits, corpus file, tokenizer.

    world, paths, tokenizer = prepare_world(world_cfg, out_dir, vocab_size=2048)

Writes `<out_dir>/world/{corpus,train,dev,test}.jsonl` and `<out_dir>/tokenizer/` (trained on
the training worlds only) and returns the tokenizer as loaded from disk, so a recipe and a
later `python -m ragjax.evaluate` see the same one.
"""

from __future__ import annotations

import os
from typing import Sequence

from ragjax.data.tokenizer import train_world_tokenizer
from ragjax.data.world import World, WorldConfig, generate_world, write_flashrag


def prepare_world(cfg: WorldConfig, out_dir: str, *, vocab_size: int = 2048,
                  syllables: bool = False, digit_pairs: bool = False,
                  extra_tags: Sequence[str] = (), write: bool = True
                  ) -> tuple[World, dict[str, str], object]:
  """`write=False` reads what another process wrote (multi-host: one writes, all read)."""
  from transformers import AutoTokenizer
  world = generate_world(cfg)
  tok_dir = os.path.join(out_dir, "tokenizer")
  if write:
    paths = write_flashrag(world, os.path.join(out_dir, "world"))
    train_world_tokenizer(tok_dir, cfg, vocab_size=vocab_size, world=world, syllables=syllables,
                          digit_pairs=digit_pairs, extra_tags=extra_tags)
  else:
    paths = {s: os.path.join(out_dir, "world", f"{s}.jsonl")
             for s in ("corpus", "train", "dev", "test")}
  return world, paths, AutoTokenizer.from_pretrained(tok_dir, local_files_only=True)
