"""ragjax.rollout: search protocols and the multi-turn engine that turns prompts into Trajectories.

Modules: `labels` (source labels, loss mask), `protocols` (Search-R1, REX-RAG, AutoRefine, R3-RAG,
UR², ReZero), `engine` (RolloutEngine) and its parts (`sizing`, `waves`, `turn_loop`, `turns`,
`rows`, `retrieval_step`, `contexts`), `trajectory` (Trajectory batch + metadata), `hooks` and
`rex_rag` (mid-rollout row edits), `dump` / `viewer` / `view` (JSONL, HTML, terminal).
Imports stay per module so the viewer CLI starts without jax.
"""
