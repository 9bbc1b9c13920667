"""The built-in plug-ins, listed in one place.

Each built-in registers itself in `ragjax.registry` where it is defined (the decorator
`@registry.register(kind, name)` beside the code); importing this module imports every such
module, so every built-in is registered.  The registry loads it on its first lookup, so no
other module (no package `__init__`) imports a module only to register it.  A new method's
plug-ins go in their package and their module goes in the list below.

    python -m ragjax.registry          # what is registered, kind by kind
"""

# data_stage: ur2_curriculum
import ragjax.data.curriculum  # noqa: F401
# advantage: grpo, drgrpo, rloo, reinforce_pp_*, gae
import ragjax.rl.advantages  # noqa: F401
# reward, metric: em, f1, cover_em, format, search_r1_em, autorefine, r3_rag, rezero_*, ur2_*
import ragjax.rl.rewards.autorefine  # noqa: F401
import ragjax.rl.rewards.builtin  # noqa: F401
import ragjax.rl.rewards.r3_rag  # noqa: F401
import ragjax.rl.rewards.rezero  # noqa: F401
import ragjax.rl.rewards.ur2  # noqa: F401
# batch_filter, behaviour, metric: rex_rag
import ragjax.rl.rex_rag.correction  # noqa: F401
import ragjax.rl.rex_rag.metrics  # noqa: F401
import ragjax.rl.rex_rag.trajectory_filter  # noqa: F401
# batch_filter: filter_groups (DAPO's dynamic sampling)
import ragjax.rl.dynamic_sampling  # noqa: F401
# signature: two_hop_em, step_relevance, ...
import ragjax.rl.signatures  # noqa: F401
# protocol: search_r1, rex_rag, direct, autorefine, r3_rag, rezero, ur2, world
import ragjax.rollout.protocols.autorefine  # noqa: F401
import ragjax.rollout.protocols.r3_rag  # noqa: F401
import ragjax.rollout.protocols.rezero  # noqa: F401
import ragjax.rollout.protocols.search_r1  # noqa: F401
import ragjax.rollout.protocols.ur2  # noqa: F401
import ragjax.rollout.protocols.world  # noqa: F401
# rollout_hook: rex_rag_clone
import ragjax.rollout.rex_rag  # noqa: F401
