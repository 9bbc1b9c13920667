"""ragjax.wiring: what the recipes and entry points build from a config — the shared parts
(`checks`: what a run reads, before any work; `components`: data, retriever, mesh, policy,
engines, trainer), the model services (`chat_services`) and the config files themselves
(`config_files`)."""
