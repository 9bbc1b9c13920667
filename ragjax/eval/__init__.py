"""ragjax.eval: evaluation systems (greedy and sampled rollouts of a policy over examples),
their tables with bootstrap intervals, trajectory pages, and diagnostics (`trace_nll`)."""
