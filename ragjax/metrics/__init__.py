"""Answer metrics every method reports, in one place so training rewards and evaluation tables
can never disagree: SQuAD EM / token F1 / cover-EM (`answer`), multiple-choice letter accuracy
(`choice`), rule-based math equivalence (`math_equiv`)."""

from ragjax.metrics.answer import (answer_metrics, cover_exact_match, exact_match,
                                   normalize_answer, token_f1)
from ragjax.metrics.choice import letter_match
from ragjax.metrics.math_equiv import math_equal

__all__ = ["answer_metrics", "cover_exact_match", "exact_match", "letter_match", "math_equal",
           "normalize_answer", "token_f1"]
