"""REX-RAG's probe policy as a mid-rollout hook (Jiang et al. 2025, "REX-RAG"; seeds §1.4).

When an original (non-clone) row gives a wrong answer in a turn where search is still allowed,
with probability p it is cloned into a spare row of the same group; the clone loses the
`<answer>...</answer>` span of that turn (the reasoning before it stays), gets one exploration
prompt from the pool appended as INJECTED tokens, and keeps rolling.  Clones are never cloned
again, and answers in the final forced turn are not eligible.  An answer is wrong when its EM
against the row's prompt record (`golden_answers`) is 0, or as `is_wrong(group_id, answer)`
says when given.  Registered as the rollout hook `rex_rag_clone`.

Random draws are seeded per row from (hook seed, the run's seed, the row's index in the batch,
the turn), so a row's clone depends only on its run and place (a resumed training run draws the
same clones, whatever waves or processes the batch was split into).  With
`EngineConfig.spare_rows=-1` the engine reserves `spare_rows(rows)` rows: the mean number of
clones (rows x p, if every row were eligible) plus four standard deviations.  A clone wanted
when no spare row is left is skipped and counted (`rex_rag_clone/overflow` in the batch's
stats), never an error; so are the eligible answers and the clones made.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Optional, Sequence

import numpy as np

from ragjax import registry
from ragjax.metrics import exact_match
from ragjax.rollout.hooks import RowEditor, TurnView
from ragjax.rollout.labels import Source
from ragjax.rollout.protocols.base import Kind, first_tag_action
from ragjax.rollout.segments import Segment

# REX-RAG Table 8, verbatim (each opens <think> and leaves it open).
EXPLORATION_PROMPTS: tuple[str, ...] = (
    "<think> Perhaps I've overlooked critical points or slipped up in my logic.",
    "<think> I wonder if vital information escaped my notice or if I made an error.",
    "<think> There might be key gaps in my understanding or errors in reasoning.",
    "<think> It's possible I've missed something important or misunderstood crucial details.",
    "<think> I suspect errors crept in, or essential points went unnoticed.",
    "<think> Maybe I've misjudged something important or neglected key facts.",
    "<think> Reflecting now, I might have overlooked critical data or erred somewhere.",
    "<think> Possibly, I've missed significant insights or made a mistake.",
    "<think> I'm sensing a gap or error might be present in my recent reasoning.",
    "<think> I could have misinterpreted important facts or overlooked necessary details.",
    "<think> Aware that my reasoning might be flawed or lacking crucial points.",
    "<think> I need to reconsider—I might've skipped vital information or erred.",
    "<think> There's a chance my previous thinking has unnoticed mistakes or omissions.",
    "<think> I feel there might be something critical I overlooked or misunderstood.",
    "<think> Perhaps my earlier reasoning has hidden mistakes or missing information.",
    "<think> Concerned I might have overlooked key aspects or made subtle errors.",
    "<think> I might have unintentionally ignored essential details or misunderstood something.",
    "<think> Revisiting carefully, perhaps errors or oversights went unnoticed earlier.",
    "<think> Maybe important points slipped my attention, or I made a miscalculation.",
    "<think> It's likely I've overlooked something crucial or stumbled in logic.",
    "<think> Reflecting, I could've missed critical clues or made errors in judgment.",
    "<think> Possibly, I misunderstood something fundamental or missed key evidence.",
    "<think> Concerned about potential unnoticed mistakes or overlooked essential details.",
    "<think> Perhaps my earlier step wasn't entirely accurate or lacked vital points.",
    "<think> It's conceivable that I've neglected critical information or erred.",
    "<think> Wondering if I've mistakenly dismissed something important or misunderstood it.",
    "<think> Maybe my previous reasoning has blind spots or unnoticed errors.",
    "<think> I'm doubting if crucial points were missed or mistakes made earlier.",
    "<think> Feeling uncertain—perhaps critical details slipped past or were misunderstood.",
    "<think> Recognizing possible gaps or missteps I didn't previously notice.",
)
ABLATION_FIVE = (1, 11, 12, 14, 24)   # the 5-prompt pool of REX-RAG Table 5
# For a policy that reads no English (the synthetic world's, trained from scratch): the probe
# re-opens a search, the exploration Table 8's prompts ask for in words.
SEARCH_PROBE = "<search>"

# The code draws random.randint(0, 100) < 20, i.e. 20/101.
DEFAULT_P = 20 / 101


def wrong_by_em(view: TurnView) -> bool:
  """EM = 0 against the gold answers of the row's prompt record."""
  prompt = view.prompt if isinstance(view.prompt, dict) else {}
  if "golden_answers" not in prompt:
    raise ValueError(f"row {view.row}: the REX-RAG clone hook needs prompt records with "
                     f"'golden_answers' to judge an answer (got {type(view.prompt).__name__})")
  return not exact_match(view.action.answer or "", prompt["golden_answers"])


@dataclasses.dataclass
class RexRagCloneHook:
  is_wrong: Optional[Callable[[int, str], bool]] = None   # None: EM against the prompt record
  p: float = DEFAULT_P
  prompts: Sequence[str] = EXPLORATION_PROMPTS
  seed: int = 0
  inserted: dict = dataclasses.field(default_factory=dict)   # clone sampler row -> prompt index

  def __post_init__(self):
    if not 0.0 <= self.p <= 1.0:
      raise ValueError(f"clone probability p must be in [0, 1], got {self.p}")
    if not self.prompts:
      raise ValueError("the exploration prompt pool is empty")

  def spare_rows(self, rows: int) -> int:
    """Spare rows for a run of `rows` original rows: rows x p + 4 standard deviations of the
    clone count if every row were eligible (at most `rows`)."""
    mean = rows * self.p
    return min(rows, math.ceil(mean + 4 * math.sqrt(mean * (1 - self.p))))

  def __call__(self, views: Sequence[TurnView], editor: RowEditor) -> None:
    for v in views:
      if v.clone_of is not None or v.final or v.action.kind != Kind.ANSWER:
        continue
      wrong = (wrong_by_em(v) if self.is_wrong is None
               else self.is_wrong(v.group_id, v.action.answer or ""))
      if not wrong:
        continue
      editor.note("rex_rag_clone/eligible")
      rng = np.random.default_rng([self.seed, editor.seed, editor.first_row + v.row, editor.turn])
      if rng.random() >= self.p:
        continue
      m = first_tag_action(v.text, ("answer",))
      if m is None:
        continue
      which = int(rng.integers(len(self.prompts)))
      if editor.free_rows == 0:
        editor.note("rex_rag_clone/overflow")
        continue
      dst = editor.clone(v.row)
      editor.delete_span(dst, m.start())
      editor.insert(dst, [Segment(self.prompts[which], Source.INJECTED)])
      editor.resume(dst)
      editor.note("rex_rag_clone/made")
      self.inserted[dst] = which


def pool(indices: Optional[Sequence[int]] = None) -> tuple[str, ...]:
  """The full pool, or the prompts at `indices` (e.g. ABLATION_FIVE)."""
  return EXPLORATION_PROMPTS if indices is None else tuple(EXPLORATION_PROMPTS[i] for i in indices)


# config names of the pools: Table 8's 30 prompts, Table 5's five, the world's search probe
POOLS = {"all": pool(), "five": pool(ABLATION_FIVE), "search": (SEARCH_PROBE,)}


def named_pool(name: str) -> tuple[str, ...]:
  """The pool a config names: "all" (the 30 prompts of Table 8), "five" (Table 5's) or
  "search" (`SEARCH_PROBE`, for a policy without English)."""
  if name not in POOLS:
    raise ValueError(f"unknown REX-RAG prompt pool {name!r}; known: {sorted(POOLS)}")
  return POOLS[name]


@registry.register("rollout_hook", "rex_rag_clone")
def rex_rag_clone(p: float = DEFAULT_P, prompt_indices: Optional[Sequence[int]] = None,
                  seed: int = 0, pool_name: str = "all") -> RexRagCloneHook:
  """REX-RAG's probe clones: a wrong answer is cloned, its answer deleted, a probe prompt inserted.

  Config entry point: `rollout.hooks = {"rex_rag_clone": {"p": ..., "pool_name": "five"}}`
  (or explicit `prompt_indices`)."""
  prompts = pool(prompt_indices) if prompt_indices is not None else named_pool(pool_name)
  return RexRagCloneHook(p=p, prompts=prompts, seed=seed)
