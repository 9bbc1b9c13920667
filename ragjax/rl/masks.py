"""The loss mask, attention mask and positions a batch derives from its source labels.

The one mask function: the trainer and the SFT loop build their masks here from the labels the
rollout wrote (`ragjax.rollout.labels.Source`).  REX-RAG trains on its injected exploration
prompt; everything the environment wrote (retrieved documents, tag wrappers, chat framing,
invalid-action messages) is never trained on.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from ragjax.rollout.labels import Source

# Labels a config may train on (`rl.train_on`), by lower-case name.  Prompts and environment
# text are never trained on; retrieved documents only as Search-R1's ablation ("w/o retrieved
# token mask"), which shows why they are masked by default.
TRAINABLE = ("policy", "injected", "retrieved")
DEFAULT_TRAIN_ON = ("policy",)


def check_train_on(train_on: Sequence[str], field: str = "train_on") -> tuple[Source, ...]:
  """The Source values named by `train_on`, or a ValueError naming the offending entry."""
  out = []
  for name in train_on:
    if name not in TRAINABLE:
      raise ValueError(f"{field}: cannot train on {name!r}; trainable labels: {list(TRAINABLE)}")
    out.append(Source[name.upper()])
  return tuple(out)


def loss_mask(labels, train_on: Sequence[str] = DEFAULT_TRAIN_ON, dtype=np.float32) -> np.ndarray:
  """[B, T] 1.0 where the token's label is trained on.  Position 0 is never predicted (no token
  before it), so it is always 0."""
  labels = np.asarray(labels)
  mask = np.isin(labels, np.asarray([int(s) for s in check_train_on(train_on)])).astype(dtype)
  if mask.ndim == 2:
    mask[:, 0] = 0
  return mask


def response_mask(labels, dtype=np.float32) -> np.ndarray:
  """[B, T] 1.0 on every token after the prompt that is not padding: the policy's, the retrieved
  documents, tag wrappers, invalid-action notices, injected text.  verl's "response attention
  mask" (`attention_mask[:, -response_length:]`), the tokens its PPO critic values and whitens
  over (`rl.critic_mask`, `rl.adv_whiten_mask` = "response")."""
  labels = np.asarray(labels)
  return ((labels != Source.PAD) & (labels != Source.PROMPT)).astype(dtype)


def unsampled_rows(labels, loss) -> list[int]:
  """Rows whose loss covers tokens the sampler did not draw (a trained label other than
  POLICY, e.g. REX-RAG's inserted prompt): where the sampler's log-probs stand in for
  log pi_old (`rl.use_sampler_logprobs`), these rows are re-scored."""
  trained = (np.asarray(loss) > 0) & (np.asarray(labels) != Source.POLICY)
  return np.flatnonzero(trained.any(axis=1)).tolist()


# rl.critic_mask / rl.adv_whiten_mask: the tokens a PPO critic (its loss, GAE) and the advantage
# whitening cover: the policy's loss mask, or the whole response (verl)
TOKEN_MASKS = ("loss", "response")


def token_mask(labels, kind: str, train_on: Sequence[str] = DEFAULT_TRAIN_ON) -> np.ndarray:
  """The TOKEN_MASKS mask `kind` of `labels`: `loss_mask(labels, train_on)` or
  `response_mask(labels)`."""
  if kind == "loss":
    return loss_mask(labels, train_on)
  if kind == "response":
    return response_mask(labels)
  raise ValueError(f"unknown token mask {kind!r}; known: {TOKEN_MASKS}")


def attention_mask(labels) -> np.ndarray:
  """1 on real tokens, 0 on padding (int32)."""
  return (np.asarray(labels) != Source.PAD).astype(np.int32)


def positions(labels) -> np.ndarray:
  """RoPE positions that count real tokens only, so padding never shifts them."""
  return _count_positions(attention_mask(labels))


def _count_positions(attention: np.ndarray) -> np.ndarray:
  return np.maximum(np.cumsum(attention, axis=-1) - 1, 0).astype(np.int32)


class Masks(NamedTuple):
  """The three arrays a batch derives from its labels."""
  loss: np.ndarray          # [B, T] float32, `loss_mask`
  attention: np.ndarray     # [B, T] int32, `attention_mask`
  positions: np.ndarray     # [B, T] int32, `positions`


def masks(labels, train_on: Sequence[str] = DEFAULT_TRAIN_ON) -> Masks:
  """The loss mask, attention mask and positions of `labels`, built once for a batch."""
  labels = np.asarray(labels)
  attention = attention_mask(labels)
  return Masks(loss=loss_mask(labels, train_on), attention=attention,
               positions=_count_positions(attention))
