"""ragjax.eval: evaluation systems (greedy and sampled rollouts of a policy over examples),
their tables with bootstrap intervals, trajectory pages, diagnostics (`trace_nll`), and the
benchmark-suite harness behind `python -m ragjax.evaluate --suite`: `suites` (suites read from
the config), `harness` (resumable runs), `run_record` (run.json: what decides the predictions,
checked on resume), `fingerprint` (content hashes of the checkpoint, index and data files),
`predictions` (per-question JSONL), `scoring` and
`judging` (per-question metrics), `progress`, `paper_table` (the paper-layout table),
`published` (the published rows) and `paired` (bootstrap / McNemar between two runs)."""
