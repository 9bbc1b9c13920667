"""The config schema every recipe shares; each `configs/<recipe>.py` starts here and sets deltas.

    c = common.get_config()      # every section, with defaults
    c.recipe = "rl"
    c.rl.kl_coef = 0.001         # deltas only

Sections (all overridable on the command line, `--config.rl.kl_coef=0.01`; an unknown field is
an error naming it):
  recipe, seed, workdir, progress      which `ragjax.recipes.<recipe>` runs, and where
  hardware    the accelerators the paper used, the default `--dry_run --target`
  cpu_threads, cpu_isa  a CPU-only run uses this many cores (0: all) and caps XLA's code at
              this instruction set ("": the CPU's best), so its numbers match any machine with
              that many cores and that instruction set (ragjax.parallel.cpu_threads)
  model       preset | checkpoint | a from-scratch shape; dtypes; scan / remat; lora (adapters)
  mesh        data, fsdp, tensor (one may be -1: the remaining devices)
  data        source "world" (the synthetic world below) or "files" (train/dev question files);
              data stages over the training records (curricula)
  world, tokenizer                     the synthetic world and its tokenizer (source "world")
  retriever   an index directory, a Search-R1 /retrieve URL, or (world) an index built here;
              noise (a noisy-retrieval wrapper: paraphrase / replace / shuffle / drop_gold)
  protocol    the search protocol (`name`) and its fields (top_k, max_turns, ...)
  sampler     static shapes and sampling of the JAX sampler
  rollout     response budget, padding widths, hooks (REX-RAG clones, ...)
  sft         cold-start supervised fine-tuning (steps=0: none)
  rl, optim, critic_optim, trainer     the RL update and its loop
  judge       the model service rewards call during training (ReZero's correctness, R3-RAG's
              relevance and Acc_model), `chat_service`: kind none, the frozen base policy in
              this process, an HF checkpoint, an OpenAI-compatible URL, or the gold rule judge
  eval        evaluation batch size and question cap; retrieval depth at evaluation; benchmark
              suites (configs/suites.py), their data root, the judge model behind `acc`
              (`eval.judge`, a `chat_service`), the published row to compare with
Every model service (`judge`, `eval.judge`, R3-RAG's `teacher`, UR²'s summarisers) is a
`chat_service` section, read by `ragjax.wiring.chat_services.make_chat`.
"""

import copy

from ml_collections import ConfigDict, config_dict

from ragjax import registry
from ragjax.wiring.config_files import sibling
from ragjax.data.splits import SplitConfig
from ragjax.data.world import WorldConfig
from ragjax.models.lora import LoraConfig
from ragjax.retrieval.noisy import NoiseConfig
from ragjax.rl.run_config import OptimConfig, RLConfig, TrainerConfig
from ragjax.rl.sft import SFTConfig
from ragjax.rollout.engine import EngineConfig
from ragjax.sampling.sampler_config import SamplerConfig
from ragjax.typed_config import defaults, optional_type

suites = sibling(__file__, "suites")  # (configs/suites.py: the benchmark suites, as data)


def get_config() -> ConfigDict:
  c = ConfigDict()
  c.recipe = "rl"
  c.seed = 0
  c.workdir = "runs/default"
  c.progress = True
  c.hardware = ""               # the paper's accelerators, for `--dry_run` (e.g. "h100x8")
  c.cpu_threads = 0             # CPU-only runs: pin to this many cores (0: all of them)
  c.cpu_isa = ""                # CPU-only runs: XLA code for at most this ISA ("": the CPU's best)

  # preset: a named shape (ragjax.models.presets; random weights unless `checkpoint`);
  # checkpoint: an HF directory (its config.json wins); both empty: the shape below, from
  # scratch (the embedded default's small policies).
  c.model = ConfigDict(dict(
      preset="", checkpoint="", dtype="float32", param_dtype="float32", scan_layers=False,
      remat=False, remat_policy="full", attention_impl="", hidden_size=0, intermediate_size=0,
      num_layers=0, num_heads=0, num_kv_heads=0, head_dim=0, rope_theta=10000.0))
  # LoRA (ragjax.models.lora): rank 0 = full fine-tuning; rank > 0 trains and checkpoints only
  # adapters on `targets`, the reference policy is the base (adapters disabled), and the
  # exported policy is merged.
  c.model.lora = ConfigDict(defaults(LoraConfig))
  c.mesh = ConfigDict(dict(data=1, fsdp=-1, tensor=1))

  # stages: {registered data stage: kwargs}, applied in order to the training records before
  # the trainer walks them (UR²'s curriculum: {"ur2_curriculum": {...}}).
  c.data = ConfigDict(dict(source="world", train_files=(), dev_files=(), test_files=(),
                           stages={}))
  # split: question files pooled and split into test / dev / train by a seed, no question in
  # two splits (ragjax.data.splits; the *_files above join their split)
  c.data.split = ConfigDict(defaults(SplitConfig))
  # Every knob of ragjax.data.world.WorldConfig (its question-type weights are set in code).
  c.world = ConfigDict(defaults(WorldConfig, exclude=("qtype_weights",)))
  # extra_tags: a protocol's tags as one token each (the Search-R1 tags always are)
  c.tokenizer = ConfigDict(dict(vocab_size=2048, syllables=False, digit_pairs=False,
                                extra_tags=()))
  # index: a directory from `python -m ragjax.retrieval.build`; url: a Search-R1 /retrieve
  # server; both empty with data.source="world": an index of the world corpus built in workdir.
  # timeout: seconds per request; deadline: seconds a call may spend retrying a down server
  # before the step is retried from its start (trainer.step_retries times).
  # corpus: a passage file (FlashRAG jsonl) indexed once under the workdir with `backend` when
  # index and url are empty (the world's corpus is its own).
  c.retriever = ConfigDict(dict(index="", url="", corpus="", backend="scann", encoder_dir="",
                                cache_size=4096, timeout=30.0, deadline=120.0))
  # pin: the index the paper searched (encoder name, index "exact" | "approximate", passages);
  # `--dry_run` compares the manifest of retriever.index with the paper's and shows the pin
  # while no index is set (ragjax.planning.retriever).  Empty: nothing pinned.
  # encoding: the prefixes and pooling its vectors were built with (planning.retriever.
  # encoding_name); corpus: the passage files by name (the dump's name)
  c.retriever.pin = ConfigDict(dict(encoder="", index="", passages=0, encoding="", corpus=""))
  # ragjax.retrieval.noisy: kind "" (none) | paraphrase (distractors in the index) | replace |
  # shuffle (the top-k, with probability p per query) | drop_gold (each gold passage, with
  # probability p); seeded, a deterministic function of (seed, query).
  c.retriever.noise = ConfigDict(defaults(NoiseConfig))

  # The protocol class registered under `name` owns every field's default (`protocol`).
  c.protocol = protocol("search_r1", "top_k", "max_turns", "obs_max_tokens")
  # cpu_attention_kernel: on an unsharded CPU the cached attention runs in ragjax's C++ kernel
  # (ragjax.models.cpu_attention; XLA's attention when False or when it cannot be built).
  # unroll_layers: a `model.scan_layers` policy samples with its layers unrolled (a CPU's choice).
  # Other SamplerConfig fields are set by the code (greedy, stops, eos) or added by a recipe.
  c.sampler = ConfigDict(defaults(SamplerConfig, (
      "max_cache_length", "max_new_tokens", "prompt_buckets", "extend_buckets", "temperature",
      "top_p", "cpu_attention_kernel", "unroll_layers", "shared_prefix")))
  # Override: a run's shapes are Search-R1's (a 4096-token cache, 500 new tokens per turn);
  # SamplerConfig's own are a small sampler's, which tests and benchmarks build directly.
  c.sampler.update(dict(max_cache_length=4096, max_new_tokens=500,
                        prompt_buckets=(64, 128, 256, 512, 1024, 2048)))
  # widths: trajectories are padded to one of these (few shapes -> few compiles);
  # hooks: {registered rollout hook: kwargs}; chat: None = the tokenizer's chat template if any.
  # wave_rows: at most this many rows decode at once (0 = the whole step's rows), or as many
  # as a KV cache of kv_budget_gb per device holds: the KV cache and prefill hold one wave
  # (see `--dry_run`).  refill: a wave's rows that finish take the next prompts' groups
  # (continuous batching; fixed waves when False or when hooks clone rows).
  # decode_chunk: decode steps per sampler call (0 = whole turns); rows that end their turn
  # meanwhile send their searches to a retrieval thread, so retrieval overlaps the other rows'
  # decoding; the documents go into the cache when the turn has ended.  Same trajectories as
  # whole turns; hooks and restart protocols run whole turns (docs/benchmarks/rollout.md).
  # max_response_tokens: 0 = no cap (EngineConfig's None); kv_budget_gb and hooks are read by
  # the factory (ragjax.rollout.factory), the rest are EngineConfig's.
  c.rollout = ConfigDict(dict(max_response_tokens=0, kv_budget_gb=0.0, hooks={}, **defaults(
      EngineConfig, ("spare_rows", "wave_rows", "refill", "decode_chunk", "widths", "chat"))))
  # Override: runs overlap retrieval with decoding (EngineConfig's 0 is whole turns, what an
  # engine built without a config does) and pad to a few widths (EngineConfig's None pads to
  # multiples of 8: more shapes, more compiles).
  c.rollout.update(dict(decode_chunk=32, widths=(512, 1024, 2048, 4096)))
  c.rollout.chat = config_dict.placeholder(bool)

  # The update's sections take their fields and defaults from the typed configs the code reads
  # (ragjax.rl.run_config, ragjax.rl.sft: each field is documented there), so the defaults live in
  # one place; recipes set deltas.
  c.sft = ConfigDict(defaults(SFTConfig))
  c.rl = ConfigDict(defaults(RLConfig))
  c.rl.dual_clip = config_dict.placeholder(float)
  # the temperature log-probs are scored at: None = sampler.temperature (a different value is
  # refused: the ratio would compare distributions the rollouts were not drawn from)
  c.rl.temperature = config_dict.placeholder(float)
  # optim.clock: what one schedule step is, "rl_step" (verl: once per RL step) or "update"
  # (OpenRLHF, TRL: once per optimizer update); total_steps 0: the whole run (derived).
  c.optim = ConfigDict(defaults(OptimConfig))
  c.critic_optim = None
  c.trainer = ConfigDict(defaults(TrainerConfig))
  # The training-time judge rewards call (eval.judge is the evaluation's): see chat_service.
  c.judge = chat_service("", max_prompt_tokens=1024, max_new_tokens=32)
  # data_root: where suite files are looked up ("" = ../shared/data beside the repo);
  # method: the row of configs/paper_results.json this config reproduces (with the model
  # preset as its size); judge: the model behind `acc`, a chat_service of kind "auto" (an
  # OpenAI-compatible url + model, or an HF checkpoint run in process; both empty = no judge,
  # acc is reported as not computed); top_k: retrieval depth for evaluation engines (0 =
  # protocol.top_k, the training depth).
  c.eval = ConfigDict(dict(
      batch_size=64, max_questions=0, top_k=0, data_root="", method="", model="",
      baselines=True,    # the qa recipe's untrained rows (direct answer, prompted search)
      test_rows=True,    # the qa recipe's cold-start and trained rows (False: RL only; what
                         # python -m ragjax.compare sets, as it evaluates every policy itself)
      judge=chat_service("auto", model="", max_retries=8, max_prompt_tokens=4096),
      # a fresh copy per config: the suites hold placeholders (FieldReferences), which a
      # shared copy would let one config's override set for every later one
      suites=ConfigDict(copy.deepcopy(suites.SUITES))))
  return c


def chat_service(kind: str = "", **overrides) -> ConfigDict:
  """A model service section (a `ChatModel`), the one shape of every model a run calls: the
  training judge `judge`, the evaluation judge `eval.judge`, R3-RAG's `teacher`, UR²'s
  `ur2.knowledge.summariser` / `math_summariser`; read by
  `ragjax.wiring.chat_services.make_chat`, which checks the kinds each role accepts.
  kind: "" none; "url" an OpenAI-compatible server (`url`, `model` = the served model's name,
  `api_key_env`, `max_concurrency` / `max_retries` / `timeout`, `cache` a JSONL file of
  replies); "checkpoint" an HF directory run in this process; "base" the policy as loaded,
  before training (with LoRA exactly the frozen base, "the policy without LoRA"), in this
  process sharing its weights; "gold" (judges) a rule judge reading the data's gold passages;
  "world" (teachers) the synthetic world's scripted teacher; "script" (teachers) R3-RAG
  steps scripted from real questions' gold answers (`script.require_retrieved`); "auto" (eval.judge, summarisers)
  "url" when `url` is set, else "checkpoint" when `checkpoint` is, else none.  In-process
  models batch `max_batch` prompts of at most `max_prompt_tokens`, answering in at most
  `max_new_tokens` (0: the caller's own budget, a template's; in process at most 512);
  `model` names them too."""
  fields = dict(kind=kind, url="", model="judge", api_key_env="", checkpoint="", cache="",
                max_concurrency=8, max_retries=3, timeout=120.0, max_batch=16,
                max_prompt_tokens=1024, max_new_tokens=512)
  unknown = sorted(set(overrides) - set(fields) - {"world", "script"})
  if unknown:
    raise ValueError(f"chat_service: unknown fields {unknown}; known: {sorted(fields)}")
  fields.update(overrides)
  return ConfigDict(fields)


def protocol(name: str, *fields: str, **overrides) -> ConfigDict:
  """A `protocol` section: `name`, the defaults of the protocol class registered under it for
  `fields` (the ones a recipe exposes to `--config.protocol.F`), then `overrides` (the values
  the recipe changes).  Fields left out apply as the class defines them."""
  registry.check("protocol", [name], "protocol.name")
  cls = registry.lookup("protocol", name)
  section = ConfigDict(dict(name=name))
  for field, value in {**defaults(cls, (*fields, *overrides)), **overrides}.items():
    tp = optional_type(cls, field)
    section[field] = config_dict.placeholder(tp) if value is None and tp else value
  return section


def config_arg(arg: str, known, default: str = "tiny") -> str:
  """The lower-cased config argument (`--config=FILE:ARG`), or an error listing `known`."""
  arg = (arg or default).lower()
  if arg not in known:
    raise ValueError(f"unknown config argument {arg!r}; use one of {sorted(known)}")
  return arg


# e5's prefixes and pooling as Search-R1's index builder and server apply them
E5_ENCODING = "query 'query: ', passage 'passage: ', mean pooling"


def pin_wiki18_e5(c) -> None:
  """The retriever of Search-R1 and the papers built on it: e5-base-v2 embeddings in an exact
  (FAISS Flat, inner product) index over wiki-18, the DPR December-2018 Wikipedia dump in
  21,015,324 100-word passages."""
  c.retriever.pin.update(dict(encoder="e5-base-v2", index="exact", passages=21015324,
                              encoding=E5_ENCODING, corpus="wiki-18.jsonl"))


def tiny_world(c) -> None:
  """The synthetic world at test size, indexed with BM25 (no weights or corpus to download)."""
  c.data.source = "world"
  c.world.update(dict(seed=0, train_worlds=1, num_train=64, num_dev=16, num_test=16,
                      num_people=30, num_places=10, num_orgs=8, num_works=12, retry_groups=6))
  c.tokenizer.vocab_size = 1024
  c.retriever.backend = "bm25"


def tiny_rollout(c) -> None:
  """Short turns and observations for the tiny Search-R1-style configs on `tiny_world`."""
  c.protocol.update(dict(top_k=2, max_turns=2, obs_max_tokens=64))
  c.sampler.update(dict(max_cache_length=768, max_new_tokens=32,
                        prompt_buckets=(64, 128, 256, 384, 512)))
  c.rollout.widths = tuple(range(64, 769, 64))
  c.eval.batch_size = 16
