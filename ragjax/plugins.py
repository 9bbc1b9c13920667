"""The built-in plug-ins, registered in one place.

Each built-in registers itself in `ragjax.registry` where it is defined (a decorator beside the
code); importing this module imports every such module, so every built-in is registered.  The
registry loads it on its first lookup, so no other module imports a package only to register
it.  A new method's plug-ins go in their package and their module goes in the list below.

    python -m ragjax.registry          # what is registered, kind by kind
"""

from ragjax.data import curriculum  # noqa: F401  data_stage: ur2_curriculum
from ragjax.rl import advantages  # noqa: F401  advantage: grpo, drgrpo, rloo, reinforce_pp_*
from ragjax.rl import rewards  # noqa: F401  reward, metric: em, f1, ..., autorefine, r3_rag, ur2_*
from ragjax.rl import rex_rag  # noqa: F401  batch_filter, behaviour, metric: rex_rag
from ragjax.rl import signatures  # noqa: F401  signature: two_hop_em, step_relevance, ...
from ragjax.rollout import protocols  # noqa: F401  protocol: search_r1, autorefine, ...
from ragjax.rollout import rex_rag as rex_rag_hook  # noqa: F401  rollout_hook: rex_rag_clone
