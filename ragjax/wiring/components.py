"""Recipe parts built from a config: data, retriever, mesh, policy, engines, trainer, evaluation.

Every recipe wires these in its own order; none of them holds method logic (that lives in the
packages and the plug-in registry).  `evaluate_checkpoint` is what `python -m ragjax.evaluate`
runs for any recipe's config.
"""

from __future__ import annotations

import dataclasses
import json
import functools
import os
import time
from typing import Optional, Sequence

import jax

from ragjax import registry
from ragjax.data.readers import as_record, read_examples
from ragjax.data.splits import SplitConfig, check_splits, merge_splits, split_records
from ragjax.models.model_config import DecoderConfig
from ragjax.models.decoder import init_params
from ragjax.models.hf_io import check_decoder_dir
from ragjax.models.lora import adapter_from_config
from ragjax.parallel.distributed import one_writer
from ragjax.parallel.mesh import mesh_from_config
from ragjax.wiring.chat_services import check_chat, make_services
from ragjax.wiring.checks import check_data_files, check_mesh, check_run_inputs, check_world
from ragjax.retrieval.noisy import NoiseConfig, wrap_retriever, write_paraphrased_corpus
from ragjax.rl.checkpoint import check_resume as _check_resume
from ragjax.rl.run_config import (RunConfig, config_fingerprint, parse_run_config,
                                  value_head_std)
from ragjax.rl.selection import evaluation_data
from ragjax.rl.sft import SFTConfig
from ragjax.rl.trainer import Trainer
from ragjax.rollout.factory import make_engine, make_hooks, protocol_from_config, sampler_config
from ragjax.typed_config import from_dict

RL_DIR = "rl"                   # the RL run's checkpoints and metrics, under the workdir
POLICY_DIR = "policy"           # the trained policy as an HF directory


def log(msg: str) -> None:
  print(f"[ragjax {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --- checks before any work -------------------------------------------------------------------
def validate(c, question_files: bool = True) -> RunConfig:
  """Every registry key and typed section of the config, checked before any data, index or
  training work (a typo fails in a second, not after minutes of set-up).  `question_files=False`:
  `data.{train,dev,test}_files` are the recipe's own to read and check (UR²'s "TASK:PATH");
  `data.split`'s draw is checked here still."""
  run = parse_run_config(c)
  check_run_inputs(c)
  check_world(c)
  check_data_files(c, question_files=question_files)
  check_mesh(c.mesh)
  sampler_config(c, protocol_from_config(c), (), greedy=False)
  if c.model.get("checkpoint"):
    check_decoder_dir(c.model.checkpoint)
  make_hooks(c)
  adapter = adapter_from_config(c.model.lora)
  if adapter is not None and adapter.lora.layers and c.model.get("checkpoint"):
    from ragjax.models.hf_io import decoder_config_of
    check_lora_layers(adapter.lora.layers, decoder_config_of(c.model.checkpoint).num_layers)
  noise_config(c)
  check_chat(c, "judge")
  registry.check("reward", run.rl.rewards, "rl.rewards")
  registry.check("data_stage", c.data.get("stages", {}), "data.stages")
  for name, kw in dict(c.data.get("stages", {})).items():
    registry.check_kwargs("data_stage", name, kw, f"data.stages.{name}")
  if c.data.source not in ("world", "files"):
    raise ValueError(f"data.source must be 'world' or 'files', got {c.data.source!r}")
  split = split_config(c)
  if c.data.source == "files" and question_files and not (c.data.train_files or split.files):
    raise ValueError("data.source='files' needs data.train_files (FlashRAG jsonl / verl parquet) "
                     "or data.split.files")
  sft = from_dict(SFTConfig, c.sft, "sft")
  if 0 < sft.steps < sft.warmup_steps and not c.get("r3", {}).get("sft_epochs"):
    raise ValueError(f"sft.warmup_steps ({sft.warmup_steps}) must be <= sft.steps "
                     f"({sft.steps}): the warm-up would never end")
  if c.data.source == "files":      # sizes, overlaps and repeats, before any model or index
    question_splits(c, own_files=question_files)
  return run


def check_resume(c) -> None:
  """Refuses, before any data, index or model work, to resume the RL run in `<workdir>/rl`
  from a checkpoint written under another config (`ConfigMismatchError` naming each differing
  field); the trainer would refuse the same only after the whole set-up."""
  step = _check_resume(os.path.join(os.path.abspath(c.workdir), RL_DIR), config_fingerprint(c))
  if step is not None:
    log(f"resuming the RL run from its step-{step} checkpoint (same config)")


# --- the recipes' caches -------------------------------------------------------------------
DAMAGED_SUFFIX = ".damaged"
STALE_SUFFIX = ".stale"


def set_aside(path: str, why: str, stale: bool = False) -> None:
  """Renames a damaged cache file or directory to `<path>.damaged` (replacing an older one),
  with one line saying so; the caller recomputes what it held.  `stale`: not damaged but made
  under other settings (e.g. another policy), kept as `<path>.stale` and said so."""
  aside = path + (STALE_SUFFIX if stale else DAMAGED_SUFFIX)
  if os.path.isdir(aside) and not os.path.islink(aside):
    import shutil
    shutil.rmtree(aside)
  elif os.path.lexists(aside):
    os.remove(aside)
  os.replace(path, aside)
  state = "out of date" if stale else "damaged"
  log(f"{path} is {state} ({' '.join(why.split())[:200]}); set aside as {aside}, recomputing")


def read_cache(path: str, valid=lambda data: True) -> Optional[dict]:
  """A JSON object a recipe cached (an evaluation, a cold start's record), or None when there
  is none.  One that cannot be read (bad JSON or UTF-8: an interrupted write) or is not the
  shape `valid(data)` expects is set aside (`set_aside`) and None returned: recompute it."""
  if not os.path.lexists(path):
    return None
  import json
  try:
    with open(path, encoding="utf-8") as f:
      data = json.load(f)
  except (OSError, ValueError) as e:        # JSONDecodeError and UnicodeDecodeError included
    set_aside(path, f"{type(e).__name__}: {e}")
    return None
  if not isinstance(data, dict) or not valid(data):
    set_aside(path, f"not the record it should hold: {type(data).__name__} "
                    f"{json.dumps(data)[:80]}")
    return None
  return data


# --- data and retrieval -----------------------------------------------------------------------
@dataclasses.dataclass
class Setup:
  """What a recipe trains and evaluates on: records by split, the retriever, and (for the
  synthetic world) its tokenizer and extras."""
  splits: dict                     # split -> list of records (plain dicts)
  retriever: object
  tokenizer: Optional[object] = None
  world: Optional[object] = None
  corpus_path: Optional[str] = None  # the world's corpus file (indexed under the workdir)


def noise_config(c) -> NoiseConfig:
  return from_dict(NoiseConfig, c.retriever.noise, "retriever.noise")


def open_retriever(c, workdir: str, corpus_path: Optional[str] = None, *, rebuilt: bool = False):
  """`retriever.url` (a Search-R1 server), `retriever.index` (a built index), or an index of
  `corpus_path` built once under `<workdir>/index`; with `retriever.noise` set, wrapped in the
  noisy retriever (paraphrase distractors go into the index built here).  An index built here
  that no longer opens (a cut file) is set aside and built again."""
  r, noise, given = c.retriever, noise_config(c), corpus_path
  if noise.kind == "paraphrase" and (r.url or r.index or corpus_path is None):
    raise ValueError("retriever.noise.kind='paraphrase' puts distractors into the index, so it "
                     "needs the corpus: build an index over `python -m ragjax.retrieval.noisy "
                     "--corpus C --out C_noisy.jsonl` and set retriever.index (with kind='')")
  if r.url:
    from ragjax.retrieval import SearchClient
    return wrap_retriever(SearchClient(r.url, timeout=r.timeout, deadline=r.deadline), noise)
  from ragjax.retrieval import open_index
  from ragjax.retrieval.store import PassageStore
  corpus_path = corpus_path or r.get("corpus") or None
  if r.index:
    index_dir = r.index
  elif corpus_path is None:
    raise ValueError("set retriever.index (an index directory), retriever.url or "
                     "retriever.corpus (a passage file indexed under the workdir)")
  else:
    from ragjax.retrieval.index import EncoderSpec, build_index
    if noise.kind == "paraphrase":   # the distractors are part of the indexed corpus
      index_dir = os.path.join(workdir, f"index_paraphrase_n{noise.paraphrases}_p{noise.p:g}"
                                        f"_s{noise.seed}-{file_digest(corpus_path)[:12]}")
      os.makedirs(index_dir, exist_ok=True)
      noisy = os.path.join(index_dir, "corpus_paraphrased.jsonl")
      if not os.path.exists(os.path.join(index_dir, "index.json")):
        write_paraphrased_corpus(corpus_path, noisy, noise)
      corpus_path = noisy
    else:
      index_dir = index_dir_for(corpus_path, workdir)
    if not os.path.exists(os.path.join(index_dir, "index.json")):
      build_index(corpus_path, index_dir, backend=r.backend,
                  encoder_spec=EncoderSpec(model_dir=r.encoder_dir or None), progress=c.progress)
      with open(os.path.join(index_dir, CORPUS_STAMP), "w") as f:
        f.write(file_digest(corpus_path))
  try:
    retriever = open_index(index_dir, cache_size=r.cache_size)
  except (OSError, ValueError) as e:
    if r.index or rebuilt:          # the user's index: theirs to rebuild
      raise
    set_aside(index_dir, str(e))      # the run's own index: built again from the corpus
    return open_retriever(c, workdir, given, rebuilt=True)
  pool = PassageStore(index_dir) if noise.kind == "replace" else None
  return wrap_retriever(retriever, noise, pool)


CORPUS_STAMP = "ragjax_corpus.sha256"


def file_digest(path: str) -> str:
  import hashlib
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      h.update(block)
  return h.hexdigest()


def index_dir_for(corpus_path: str, workdir: str) -> str:
  """`<workdir>/index`, or `<workdir>/index-<digest>` when that one indexes another corpus
  (e.g. a world regenerated with a fresh test world): an index is reused only for the exact
  corpus it was built from."""
  digest = file_digest(corpus_path)
  default = os.path.join(workdir, "index")
  stamp = os.path.join(default, CORPUS_STAMP)
  if not os.path.exists(os.path.join(default, "index.json")):
    return default
  if os.path.exists(stamp) and open(stamp).read().strip() == digest:
    return default
  return os.path.join(workdir, f"index-{digest[:12]}")


def load_data(c, workdir: str, *, retriever: bool = True) -> Setup:
  """The synthetic world (`data.source='world'`, written under the workdir) or question files."""
  if c.data.source == "world":
    from ragjax.data.world import WorldConfig
    from ragjax.data.world_setup import prepare_world
    with one_writer("world") as write:        # multi-host: one process writes, all read
      world, paths, tok = prepare_world(from_dict(WorldConfig, c.world, "world"), workdir,
                                        write=write, **c.tokenizer.to_dict())
      ret = open_retriever(c, workdir, paths["corpus"]) if retriever else None
    splits = {s: [as_record(e) for e in q] for s, q in world.questions.items()}
    return Setup(splits, ret, tok, world, paths["corpus"])
  return Setup(question_splits(c), open_retriever(c, workdir) if retriever else None)


def question_splits(c, own_files: bool = True) -> dict:
  """{"train", "dev", "test"}: records of `data.{split}_files` plus those `data.split` draws
  from its files, checked (`check_splits`: disjoint, no question twice in one split).  Read
  once per process for the same files and sizes (the config check reads them first).
  `own_files=False`: `data.split`'s draw alone (a recipe reading `data.{split}_files` its own
  way, UR²'s "TASK:PATH", adds them)."""
  split_cfg = split_config(c)
  files = {s: tuple(c.data.get(f"{s}_files", ()) or ()) if own_files else ()
           for s in ("train", "dev", "test")}
  stamp = tuple((p, os.path.getmtime(p), os.path.getsize(p)) if os.path.isfile(p) else (p,)
                for p in (*files["train"], *files["dev"], *files["test"], *split_cfg.files))
  splits = _question_splits(tuple(files.items()), split_cfg, stamp)
  return {s: list(records) for s, records in splits.items()}


@functools.lru_cache(maxsize=1)
def _question_splits(files: tuple, split_cfg: SplitConfig, stamp: tuple) -> dict:
  del stamp                          # the files' (path, mtime, size): part of the cache key
  files = dict(files)
  splits = {s: [as_record(e) for f in files[s] for e in read_examples(f)] for s in files}
  sources = {s: list(files[s]) for s in files}
  if split_cfg.files:
    pooled = [as_record(e) for f in split_cfg.files for e in read_examples(f)]
    drawn = split_records(pooled, split_cfg)
    drawn_from = f"data.split.files {' '.join(split_cfg.files)}"
    # the files' own questions against the held-out ones (a drawn training question that a
    # dev or test file holds leaves the training split: merge_splits)
    for s in ("dev", "test"):
      if drawn[s]:
        sources[s] = [drawn_from, *sources[s]]
    check_splits({"train": splits["train"], "dev": drawn["dev"] + splits["dev"],
                  "test": drawn["test"] + splits["test"]}, sources)
    if drawn["train"]:
      sources["train"] = [drawn_from, *sources["train"]]
    splits = merge_splits(drawn, splits)
    if drawn["train"] and not splits["train"]:
      raise ValueError(f"data: the dev and test files hold every training question "
                       f"data.split draws from {list(split_cfg.files)}; none is left to train on")
  check_splits(splits, sources)
  return splits


def split_config(c) -> SplitConfig:
  """`data.split`: question files split into train / dev / test by a seed (absent: none)."""
  section = c.data.get("split") if "data" in c else None
  if not section:
    return SplitConfig()
  return from_dict(SplitConfig, section, "data.split", files=tuple(section.get("files", ())))


@dataclasses.dataclass
class Start:
  """What RL starts from: the data and retriever, the policy (after any cold start)."""
  setup: Setup
  cfg: DecoderConfig
  params: dict
  tokenizer: object
  mesh: object = None


def system_engines(c, s: Start, systems, splits, engine_config=None, **engine_kw):
  """(name, greedy engine, records, split) for each split and each (name, params,
  with_retrieval) system; every engine shares one sampler, compiled once.  `engine_config`:
  the config the engines are built from (default `c`)."""
  from ragjax.retrieval.types import NullRetriever
  sampler = None
  for split in splits:
    recs = s.setup.splits[split][:c.eval.max_questions or None]
    for name, params, with_retrieval in systems:
      ret = s.setup.retriever if with_retrieval else NullRetriever()
      engine = make_engine(engine_config or c, s.cfg, params, s.tokenizer, ret, greedy=True,
                           hooks=[], sampler=sampler, **engine_kw)
      sampler = engine.sampler
      yield name, engine, recs, split


def evaluate_policies(c, s: Start, systems, splits=("dev", "test")) -> list:
  """Greedy EM of each (name, params, with_retrieval) system on each split's questions."""
  from ragjax.eval.systems import evaluate_system
  return [evaluate_system(name, engine, recs, split, batch_size=c.eval.batch_size, seed=c.seed,
                          signatures=tuple(c.rl.get("signatures", ())))
          for name, engine, recs, split in system_engines(c, s, systems, splits,
                                                          evaluation=True)]


def apply_data_stages(c, records: Sequence[dict]) -> list[dict]:
  """The training list: `data.stages` ({registered data stage: kwargs}) applied in order,
  each seeded by `c.seed` (deterministic, so the trainer's data position resumes it)."""
  stages = c.data.get("stages", {}) or {}
  records = list(records)
  for name, kw in stages.items():
    kw = kw.to_dict() if hasattr(kw, "to_dict") else dict(kw or {})
    records = registry.lookup("data_stage", name)(records, seed=c.seed, **kw)
    log(f"data stage {name}: {len(records)} training questions")
  return records


# --- mesh, policy, critic ---------------------------------------------------------------------
def make_mesh(c):
  """The config's mesh; None on a single device (no sharding to do)."""
  if len(jax.devices()) == 1:
    return None
  return mesh_from_config(c.mesh)


def rollout_mesh(mesh):
  """The sampler's mesh: the training mesh on one process; on several, each process decodes
  its share of the prompts on its own devices (None when it has one)."""
  if jax.process_count() == 1 or mesh is None:
    return mesh
  if jax.local_device_count() == 1:
    return None
  from ragjax.parallel.mesh import make_mesh
  return make_mesh(data=1, fsdp=-1, tensor=1, devices=jax.local_devices())


def policy_config(c, tok) -> DecoderConfig:
  """A from-scratch shape (`model.hidden_size` ...), or a preset sized to the tokenizer."""
  m = c.model
  dtypes = dict(dtype=m.dtype, param_dtype=m.param_dtype, scan_layers=m.scan_layers,
                remat=m.remat, remat_policy=m.get("remat_policy", "full"),
                attention_impl=m.get("attention_impl", ""))
  if m.preset:
    from ragjax.models.presets import get_preset
    return get_preset(m.preset).replace(vocab_size=len(tok), eos_token_id=tok.eos_token_id,
                                        **dtypes)
  if not m.hidden_size:
    raise ValueError("set model.checkpoint (an HF directory), model.preset, or the model's "
                     "shape (model.hidden_size, ...)")
  return DecoderConfig(arch="qwen2", vocab_size=len(tok), hidden_size=m.hidden_size,
                       intermediate_size=m.intermediate_size, num_layers=m.num_layers,
                       num_heads=m.num_heads, num_kv_heads=m.num_kv_heads, head_dim=m.head_dim,
                       rope_theta=m.rope_theta, tie_word_embeddings=True,
                       max_position_embeddings=c.sampler.max_cache_length,
                       bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                       pad_token_id=tok.pad_token_id, **dtypes)


def load_policy(c, tok=None, mesh=None):
  """(cfg, params, tokenizer): `model.checkpoint` loaded (into the mesh's shardings), or a
  new policy of `policy_config` with random weights (seeded by `c.seed`)."""
  cfg, params, tok = _load_policy(c, tok, mesh)
  # (a checkpoint's layer count is checked with the config; a new policy's is known here)
  check_lora_layers(c.model.lora.get("layers", 0) if "lora" in c.model else 0, cfg.num_layers)
  return cfg, params, tok


def check_lora_layers(layers: int, num_layers: int) -> None:
  """`model.lora.layers` (adapters on the top k layers) no more than the model has."""
  if layers > num_layers:
    raise ValueError(f"model.lora.layers={layers} but the model has {num_layers} layers")


def _load_policy(c, tok=None, mesh=None):
  m = c.model
  if m.checkpoint:
    from ragjax.models.hf_io import load_decoder, load_tokenizer
    from ragjax.models.sharded import decoder_shardings
    cfg, params = load_decoder(
        m.checkpoint, dtype=m.dtype, param_dtype=m.param_dtype, scan_layers=m.scan_layers,
        remat=m.remat, remat_policy=m.get("remat_policy", "full"),
        attention_impl=m.get("attention_impl", ""),
        shardings=None if mesh is None else lambda cf: decoder_shardings(cf, mesh))
    return cfg, params, load_tokenizer(m.checkpoint)
  if tok is None:
    raise ValueError("model.checkpoint is empty and the data brings no tokenizer; set "
                     "model.checkpoint to an HF directory")
  cfg = policy_config(c, tok)
  return cfg, init_params(cfg, jax.random.PRNGKey(c.seed)), tok


def init_critic(cfg: DecoderConfig, params, seed: int = 1, head_init: str = "zeros"):
  """A value model initialised from the policy's body (PPO), with a fresh value head: its bias
  0 and its weight as `rl.value_head_init=head_init` draws it (zeros, or N(0, std^2) with
  `value_head_std(head_init, hidden)`, seeded by `seed`)."""
  critic = init_params(cfg, jax.random.PRNGKey(seed), head="value")
  body = {k: v for k, v in params.items() if k in critic and k != "value_head"}
  critic = jax.tree.map(lambda x: x.copy(), {**dict(critic), **body})
  std = value_head_std(head_init, cfg.hidden_size)
  if std:
    kernel = critic["value_head"]["kernel"]
    draw = jax.random.normal(jax.random.fold_in(jax.random.PRNGKey(seed), 1), kernel.shape,
                             jax.numpy.float32) * std
    critic["value_head"] = {**critic["value_head"], "kernel": draw.astype(kernel.dtype)}
  return critic


# --- the RL stage -----------------------------------------------------------------------------
def make_trainer(c, run: RunConfig, cfg, params, tok, setup: Setup, mesh=None) -> Trainer:
  """The trainer over a sampling engine (with the config's hooks) and a greedy one for dev."""
  workdir = os.path.join(os.path.abspath(c.workdir), RL_DIR)
  sampler_mesh = rollout_mesh(mesh)
  engine = make_engine(c, cfg, params, tok, setup.retriever, greedy=False, mesh=sampler_mesh)
  greedy = make_engine(c, cfg, params, tok, setup.retriever, greedy=True, mesh=sampler_mesh,
                       hooks=[], evaluation=True)
  if jax.process_count() > 1:      # each process rolls out its share of every step
    from ragjax.rollout.process_sharded import ProcessShardedEngine
    engine, greedy = ProcessShardedEngine(engine), ProcessShardedEngine(greedy)
  critic = (init_critic(cfg, params, head_init=run.rl.value_head_init) if run.rl.uses_critic
            else None)
  return Trainer(model_cfg=cfg, run=run, params=params, engine=engine, eval_engine=greedy,
                 train_data=apply_data_stages(c, setup.splits["train"]),
                 dev_data=evaluation_data(setup.splits, run.trainer.eval_split,
                                          run.trainer.eval_per_source),
                 fingerprint=config_fingerprint(c), workdir=workdir, seed=c.seed, mesh=mesh,
                 critic_params=critic, progress=c.progress,
                 adapter=adapter_from_config(c.model.lora),
                 services=make_services(c, cfg, params, tok, mesh, setup))


def export_policy(out_dir: str, cfg, params, tok) -> str:
  """The policy as an HF directory (written once, by the main process, from the full params)."""
  from ragjax.models.hf_io import save_decoder
  from ragjax.parallel.distributed import is_main, to_host
  params = jax.tree.map(to_host, params)
  if is_main():
    save_decoder(out_dir, cfg, params, tokenizer=tok)
  return out_dir


def export_policy_gguf(path: str, cfg, params, tok, source: str = "") -> Optional[str]:
  """The policy as one float16 GGUF file for llama.cpp / Ollama (`ragjax.models.gguf_convert`),
  its tokenizer copied from `source` when the policy came from a GGUF file; None (and a log
  line) for a decoder GGUF export does not write (not Llama)."""
  from ragjax.models.gguf_convert import export_gguf
  from ragjax.models.gguf_io import is_gguf
  from ragjax.parallel.distributed import is_main, to_host
  if cfg.arch != "llama":
    log(f"no GGUF export: the policy is {cfg.arch!r}, the export writes Llama decoders")
    return None
  params = jax.tree.map(to_host, params)
  if is_main():
    export_gguf(path, cfg, params, tokenizer=tok,
                tokenizer_gguf=source if source and is_gguf(source) else "")
  return path


# --- evaluation -------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class EvalOptions:
  checkpoint: str
  split: str = "test"
  data: Optional[str] = None          # a question file instead of the config's split
  data_format: Optional[str] = None
  index: Optional[str] = None         # retriever overrides
  url: Optional[str] = None
  limit: int = 0
  samples: int = 0                    # > 0: also sampled pass@1 / pass@k rows
  temperature: float = 1.0
  metric: str = "em"                  # ragjax.metrics.by_task.NAMES ("task": UR²'s per task)
  out: Optional[str] = None           # per-question predictions here (resumable), table.md
  compare: Optional[str] = None       # another run's `out`: paired bootstrap and McNemar


def evaluate_checkpoint(c, opts: EvalOptions, qtypes: Optional[Sequence[str]] = None,
                        groups=None) -> str:
  """Greedy EM (or `opts.metric`) and F1 of an exported policy with and without retrieval
  (and sampled pass@k), by question type with bootstrap intervals, on the config's data or a
  question file; returns the markdown table.  With `opts.out`: per-question predictions in
  `<out>/predictions/{retrieval,no_retrieval}.jsonl` (a killed run resumes; `<out>/run.json`
  refuses a resume with another checkpoint, data or setting), `<out>/table.md`; with
  `opts.compare`: the two runs paired (`eval.system_run.compare_systems`)."""
  from ragjax.eval.system_run import SYSTEMS, run_system, system_result, with_ids
  from ragjax.eval.systems import results_table, sample_system
  from ragjax.models.hf_io import load_decoder, load_tokenizer
  from ragjax.retrieval.types import NullRetriever
  workdir = os.path.abspath(c.workdir)
  overridden = bool(opts.index or opts.url)
  if overridden:
    c = c.copy_and_resolve_references()
    c.retriever.index, c.retriever.url = opts.index or "", opts.url or ""
  if opts.data:
    records = [as_record(e) for e in read_examples(opts.data, opts.data_format)]
    split = os.path.basename(opts.data)
    retriever = open_retriever(c, workdir)
  else:
    setup = load_data(c, workdir)
    if opts.split not in setup.splits or not setup.splits[opts.split]:
      raise ValueError(f"the config's data has no {opts.split!r} questions "
                       f"(splits: {sorted(k for k, v in setup.splits.items() if v)})")
    records, split, retriever = setup.splits[opts.split], opts.split, setup.retriever
  limited = bool(opts.limit) and len(records) > opts.limit
  if opts.limit:
    records = records[:opts.limit]
  records = with_ids(records)
  if hasattr(retriever, "health"):
    retriever.health()              # a dead server fails here, not as an all-zero table
  out = os.path.abspath(opts.out) if opts.out else None
  if out:
    from ragjax.eval.run_record import check_run_file
    check_run_file(out, checkpoint_run_record(c, opts, split, retriever))
  cfg, params = load_decoder(opts.checkpoint)
  tok = load_tokenizer(opts.checkpoint)
  log(f"evaluating {opts.checkpoint} on {len(records)} questions of {split}"
      + (f" -> {out}" if out else ""))
  size = c.eval.batch_size
  score = None
  if opts.metric != "em":
    from ragjax.metrics.by_task import answer_score
    score = lambda answer, rec: answer_score(opts.metric, answer, rec)  # noqa: E731
  results, sampler = [], None
  for system, ret in zip(SYSTEMS, (retriever, NullRetriever())):
    engine = make_engine(c, cfg, params, tok, ret, greedy=True, hooks=[], evaluation=True,
                         sampler=sampler)
    sampler = engine.sampler
    preds = run_system(system.key, engine, records, out, batch_size=size, seed=c.seed,
                       tokenizer=tok, metric=opts.metric, score=score, limited=limited, log=log)
    results.append(system_result(system.name, split, preds, opts.metric))
  if opts.samples:
    engine = make_engine(c, cfg, params, tok, retriever, greedy=False,
                         temperature=opts.temperature, hooks=[])
    results += sample_system("policy + retrieval", engine, records, split,
                             samples=opts.samples, temperature=opts.temperature,
                             batch_size=size)
  table, _ = results_table(results, qtypes, groups,
                           "EM" if opts.metric == "em" else opts.metric)
  if out:
    with open(os.path.join(out, "table.md"), "w", encoding="utf-8") as f:
      f.write(table + "\n")
  if opts.compare:
    table += "\n\n" + compare_checkpoint_runs(out, opts.compare)
  return table


def checkpoint_run_record(c, opts: EvalOptions, split: str, retriever) -> dict:
  """`<out>/run.json` of a checkpoint evaluation (`eval.run_record`'s format): the checkpoint's
  and the data's content fingerprints, the retrieval, the metric and the config sections a
  greedy rollout depends on."""
  from ragjax.eval import run_record as rr
  from ragjax.eval.fingerprint import checkpoint_fingerprint, file_digest as content_digest
  from ragjax.eval.system_run import SYSTEMS
  from ragjax.models.gguf_io import is_gguf
  path = os.path.abspath(opts.checkpoint)
  checkpoint = {"path": path, **(content_digest(path) if is_gguf(path)
                                 else checkpoint_fingerprint(path))}
  if opts.data:
    data = {"file": os.path.abspath(opts.data), "format": opts.data_format,
            **content_digest(opts.data)}
  else:
    data = {"split": split, "data": c.data.to_dict(),
            "world": c.world.to_dict() if c.data.source == "world" else None}
  data["limit"] = opts.limit
  if c.retriever.url or c.retriever.index:
    retrieval = rr.retrieval_record(c, retriever)
  else:
    retrieval = {"built_under": os.path.abspath(c.workdir), "corpus": c.retriever.get("corpus")}
  config = {k: c[k].to_dict() for k in ("protocol", "sampler", "rollout", "retriever")}
  config["eval"] = {"top_k": int(c.eval.get("top_k", 0) or 0)}
  return json.loads(json.dumps(
      {"version": rr.VERSION, "suite": None, "checkpoint": checkpoint, "retrieval": retrieval,
       "judge": {}, "settings": {"metric": opts.metric, "data": data}, "config": config,
       "datasets": {s.key: {"system": s.name} for s in SYSTEMS}}, default=str))


def compare_checkpoint_runs(dir_a: Optional[str], dir_b: str) -> str:
  """The predictions of two checkpoint evaluations (`--out`) paired per system, EM and F1;
  writes compare.{md,json} into `dir_a`."""
  from ragjax.eval.predictions import read_predictions
  from ragjax.eval.system_run import SYSTEMS, compare_systems
  if not dir_a:
    raise ValueError("--compare needs --out (this run's predictions, to pair with the other's)")
  dir_a, dir_b = os.path.abspath(dir_a), os.path.abspath(dir_b)
  keys = [s.key for s in SYSTEMS]
  rows, md = compare_systems(SYSTEMS, read_predictions(dir_a, keys),
                             read_predictions(dir_b, keys), name_a=dir_a, name_b=dir_b)
  with open(os.path.join(dir_a, "compare.md"), "w", encoding="utf-8") as f:
    f.write(md + "\n")
  with open(os.path.join(dir_a, "compare.json"), "w", encoding="utf-8") as f:
    json.dump({"a": dir_a, "b": dir_b, "rows": rows}, f, indent=1)
  return md
