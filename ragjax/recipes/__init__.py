"""ragjax.recipes: one module per recipe (`run(config)`), each only wiring the packages — `rl`
(the generic RL recipe every config-plus-plug-ins method runs), `world` (the embedded default),
`r3_rag`, `ur2` — and the runners of `python -m ragjax.evaluate --suite` (`eval_suite`) and
`python -m ragjax.ablate` (`ablation`).  The parts they build come from `ragjax.wiring`; what a
config will do, from `ragjax.planning`."""

import os

# The embedded default's config file, beside the package in a source checkout.
DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "configs", "world.py")
