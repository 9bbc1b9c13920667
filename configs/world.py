"""The embedded default: learn to search in a synthetic world on one CPU machine.

  python -m ragjax.train                                  # this config, default size
  python -m ragjax.train --config=configs/world.py:toy    # a smoke run of a couple of minutes
  python -m ragjax.train --config.rl.kl_coef=0.001        # any field can be overridden

Sizes were chosen so the whole run fits in about fifteen minutes on two CPU cores (see
BENCHMARKS.md, docs/benchmarks/embedded_default.md); every knob is here, none is hidden in
code.  The schema and its other defaults are in configs/common.py.
"""

from ragjax.wiring.config_files import sibling

common = sibling(__file__, "common")  # (configs/common.py: the schema every recipe shares)

ARGS = ("default", "toy")     # every valid config argument


def get_config(arg: str = "default"):
  arg = (arg or "default").lower()
  if arg not in ("default", "toy"):
    raise ValueError(f"unknown config argument {arg!r}; use 'default' or 'toy'")
  toy = arg == "toy"
  c = common.get_config()
  c.recipe = "world"
  c.workdir = "runs/world-toy" if toy else "runs/world"
  # Two cores and AVX2 code, on any machine: XLA's CPU reductions split over as many threads as
  # cores, so the same seed gave a different table on a 1-core machine, and its AVX-512 code
  # computes other bits than its AVX2 code (ragjax.parallel.cpu_threads).
  c.cpu_threads = 2
  c.cpu_isa = "AVX2"

  # Many small training worlds: a policy trained from scratch memorises the names of a few
  # worlds instead of learning to copy them (docs/benchmarks_history.md); short passages keep the
  # MiniLM index and the traces cheap.  name_lexicon: every world (test included) has new
  # entities, facts and full names built from one stock of name words, one token each, which
  # a small policy can copy; with all-new words (0) it would need an induction head it does
  # not grow in this budget (bench.copy_task).  name_classes: that stock split by kind of name
  # (given names, surnames, towns, groups, works), as real names are told apart by their form:
  # with one stock the policy copied the asked person's own name word as their home town
  # (1-hop EM of the skills-only cold start 0.37 -> 0.60 with classes;
  # docs/benchmarks/embedded_default.md).
  # vocab_size: room for the 480 name words as one token each.  The toy keeps one stock of
  # 200 words (a stock by kind needs 250 there, and its 1,024 tokens split names either way).
  c.world.update(dict(
      seed=0, train_worlds=1 if toy else 16, num_train=64 if toy else 4000,
      num_dev=16 if toy else 100, num_test=16 if toy else 200,
      num_people=30 if toy else 40, num_places=10 if toy else 12, num_orgs=8 if toy else 10,
      num_works=12 if toy else 20, retry_groups=6 if toy else 8, min_passage_words=12,
      name_lexicon=200 if toy else 480, name_classes=not toy))
  c.tokenizer.update(dict(vocab_size=1024 if toy else 2304, syllables=False, digit_pairs=True))
  c.retriever.update(dict(backend="scann", encoder_dir="", cache_size=4096))

  # A ~0.9M-parameter Qwen2-style policy, trained from scratch (hidden 128: it copies names
  # and values off the passages better than hidden 96, and the faster training step pays
  # for it within the fifteen minutes; docs/benchmarks/embedded_default.md).
  c.model.update(dict(hidden_size=32 if toy else 128, intermediate_size=64 if toy else 384,
                      num_layers=1 if toy else 3, num_heads=2 if toy else 4,
                      num_kv_heads=1 if toy else 2, head_dim=16 if toy else 32,
                      rope_theta=10000.0))
  # observations cut to 160 tokens (WorldSearch's own default: 200)
  c.protocol = common.protocol("world", "top_k", "max_turns", obs_max_tokens=160)
  c.sampler.update(dict(max_cache_length=512, max_new_tokens=32, temperature=1.0,
                        prompt_buckets=(32, 64), extend_buckets=(16, 32, 64, 128, 192)))
  # Trajectories are padded to one of these widths (few shapes -> few compiles).
  c.rollout.update(dict(max_response_tokens=448, widths=(160, 256, 352, 512), chat=False))

  # Cold start: SFT on teacher-forced search traces (R3-RAG's recipe; see ragjax.data.world_traces).
  # context_weight: language modelling of the prompt and documents too (the from-scratch
  # policy has never read text; the documents' repeated names teach it to copy).
  c.sft.update(dict(steps=4 if toy else 1200, batch_size=8 if toy else 32, lr=5e-3,
                    warmup_steps=1 if toy else 40, min_lr_ratio=0.1, weight_decay=0.01,
                    gather=True, context_weight=0.5, log_every=1 if toy else 10))
  # The cold start is right in its skills and imperfect in its decisions, as a base model is,
  # so RL has decisions to discover (what the seed papers say RL teaches).  Skills, always
  # right: queries copy the question's names; `quote` opens each turn after a search with
  # `<think> the passage's sentence that states the value found </think>` and the answer (or
  # the next query) copies that value (ragjax.data.world_traces.with_quotes; without quotes the
  # policy recalls training facts instead of reading the passage:
  # docs/benchmarks/embedded_default.md).  Decisions, wrong in these shares of the traces:
  # answer without searching, stop a 2-hop question after its first hop, give up after a
  # failed search.  Over half, so the greedy cold start makes
  # the wrong decision (it answers from memory) while sampling still tries the right one 40%
  # of the time: GRPO has to discover searching (at 0.3 greedy decoding already searched and
  # GRPO moved sampled decisions but not greedy EM).  swap_answer_rate: counterfactual
  # answers (swap_answers), off: measured, it adds nothing to quoting.  answer_miss_rate /
  # refine_miss_rate: a searched trace answers a wrong value / a refine block says "not found"
  # although its search found the value, drawn independently (AutoRefine's signature world).
  c.traces = common.ConfigDict(dict(wasted_query_rate=0.15, no_search_rate=0.6,
                                    first_hop_stop_rate=0.6, give_up_rate=0.6,
                                    answer_miss_rate=0.0, refine_miss_rate=0.0, quote=True,
                                    swap_answer_rate=0.0, chunk=64 if toy else 500))

  # GRPO with retrieval in the loop (Search-R1's recipe; EM reward, retrieved tokens masked).
  # One update per rollout batch, so the sampler's own log-probs (equal to a re-scored forward
  # within 2e-4, tests/test_rollout_sampler.py) serve as the ratio's denominator: no second
  # forward.  gather: the loss projects only the policy's own tokens onto the vocabulary.
  c.rl.update(dict(
      advantage="grpo", group_size=2 if toy else 4, adv_eps=1e-6, clip_low=0.2, clip_high=0.2,
      loss_agg="token-mean", kl_coef=0.0, kl_estimator="k3", kl_in_reward=False,
      entropy_coef=0.0, value_clip=0.2, gamma=1.0, lam=1.0, train_on=("policy",),
      use_sampler_logprobs=True, gather=True, logprob_chunk=4096, ppo_epochs=1,
      mini_batch_size=0, micro_batch_size=0 if toy else 16, reward_kwargs={}))
  # micro_batch_size: one optimiser step over the 64 trajectories, its gradient summed over
  # four slices of 16: a slice's activations (4,096 positions) stay in the CPU's caches, where
  # the whole batch's activations spill to memory (update 0.95 -> 0.75 s;
  # python -m ragjax.bench.grpo_step).
  c.rl.rewards = {"em": 1.0}
  c.optim.update(dict(lr=3e-4, schedule="constant", warmup_steps=0, warmup_ratio=0.0,
                      min_lr_ratio=0.0, total_steps=0, b1=0.9, b2=0.999,
                      eps=1e-8, weight_decay=0.0, grad_clip=1.0))
  c.trainer.update(dict(
      num_steps=2 if toy else 80, batch_prompts=4 if toy else 16, eval_every=1 if toy else 20,
      eval_prompts=16 if toy else 100, save_every=1 if toy else 10, max_to_keep=1,
      keep_best_metric="dev/em", keep_best=True, tensorboard=True))
  c.eval.update(dict(batch_size=16 if toy else 100, max_questions=0))
  # Copy-or-memorise probe: teacher-forced NLL on this many train- and test-world traces.
  c.probe = common.ConfigDict(dict(traces=16 if toy else 128))
  return c
