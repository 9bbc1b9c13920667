"""ragjax.planning: what a config will do before it runs — the derived plan beside the paper's
(`plan`) and the per-device memory plan (`dry_run`); both build nothing but shapes."""
