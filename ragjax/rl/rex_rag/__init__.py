"""REX-RAG's training side (Jiang et al. 2025; seeds_rex_autorefine_r3.md §1.4), as plug-ins.

The rollout side is the clone hook `ragjax.rollout.rex_rag` (probe clones of wrong answers).
Here, registered by name for a config to use:
  batch_filter "rex_rag"  the trajectory filter: keeps the int(B x G x keep_ratio) clones whose
                          inserted prompt the old policy finds likeliest; keep_ratio is an EWM
                          of the kept clones' accuracy, carried in the method state
                          (`trajectory_filter`)
  behaviour "rex_rag"     the mixture mu = (1 - a) pi_old + a pi_eps as the ratio's
                          denominator, per token as the authors' code computes it
                          (`correction`, with Algorithm 1's prompt PMF in `pmf`)
  metric "rex_rag"        clones made / kept / overflowed, z, a, keep ratio, accuracies, and
                          mu / pi_old by segment (`metrics`)
(Registered when `ragjax.plugins` imports these modules.)
"""
