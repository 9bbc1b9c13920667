"""Evaluation reports: bootstrap confidence intervals, markdown tables, training-curve plots."""
