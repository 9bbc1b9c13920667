"""Answer metrics every method reports, in one place so training rewards and evaluation tables
can never disagree: SQuAD EM / token F1 / cover-EM (`answer`)."""

from ragjax.metrics.answer import (answer_metrics, cover_exact_match, exact_match,
                                   normalize_answer, token_f1)

__all__ = ["answer_metrics", "cover_exact_match", "exact_match", "normalize_answer", "token_f1"]
