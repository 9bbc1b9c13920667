"""`ChatModel` on a ragjax decoder in this process: a judge checkpoint, or a frozen policy copy.

    chat = LocalChatModel.from_checkpoint("ckpt/qwen2.5-7b-instruct", max_batch=32)
    chat = LocalChatModel(cfg, params, tokenizer)        # weights already in memory

The prompt is the tokenizer's chat template with the assistant generation prompt
(`apply_chat_template(..., add_generation_prompt=True)`), or, for a tokenizer without one, the
messages' contents joined by blank lines (tokenised with the tokenizer's own special tokens,
e.g. a base model's BOS).  A whole `complete` call is one prefill and one decode per chunk of
`max_batch` conversations, on the ragjax `Sampler`: greedy when `temperature == 0`, stop
strings matched on device, eos ids from the model config unless `eos_ids` says otherwise.  As
in vLLM, decoding is not steered by the stop strings (the sampler's `forbid_stop_overhang` is
off): a row stops at the token that completes one, and the reply is cut before it (a token
that runs past the stop string loses its tail too).  The params are only read.

Static shapes keep recompiles bounded: the batch pads to a power of two (at most
`max_batch`), prompts to power-of-two buckets up to `max_prompt_tokens`, and the per-call token
budget to a power of two (at least 16, at most `max_new_tokens`; replies are cut to the
requested `max_tokens`).  One sampler is kept per (budget, greedy or not), the last
`max_samplers` of them; temperature, top_p and stop strings are runtime values of it, so a
client's new settings compile nothing (top_p < 1 and = 1 are two programs).  Stop strings are
bounded, at most `MAX_STOPS` of at most `MAX_STOP_BYTES` bytes (UTF-8): their table is padded
to `MAX_STOPS` rows and to 8 or 32 bytes, and the tables of the last `MAX_STOP_TABLES` stop
tuples are kept (the server builds a request's table in its own thread, not the batcher's).
`calls` and `decode_calls` count `generate` calls and batched decodes (what the server's
batching saves).  `is_compiled` says whether a call would run only programs run before; calls
may come from several threads (the server runs one that compiles off its batching thread).
"""

from __future__ import annotations

import collections
import os
import threading
from typing import Optional, Sequence, Union

import numpy as np

from ragjax.models.model_config import DecoderConfig
from ragjax.models.gguf_io import GGUF_SUFFIX, is_gguf
from ragjax.models.hf_io import check_decoder_dir, load_decoder, load_tokenizer
from ragjax.models.chat_template import chat_prompt_ids, has_chat_template, render_chat
from ragjax.sampling.sampler_config import EOS, STOP, SamplerConfig
from ragjax.sampling.sampler import Sampler
from ragjax.sampling.stops import compile_stop_strings, token_bytes
from ragjax.services.chat_model import (SEED_RANGE, Completion, Message, check_messages,
                                        check_messages_list, check_sampling, check_seed,
                                        check_stop)


def _powers_of_two(lo: int, hi: int) -> tuple[int, ...]:
  """lo, 2 lo, 4 lo, ... below hi, then hi."""
  out, b = [], lo
  while b < hi:
    out.append(b)
    b *= 2
  return tuple(out) + (hi,)


class PromptTooLong(ValueError):
  pass


MAX_STOPS = 4              # stop strings per request
MAX_STOP_BYTES = 32        # bytes (UTF-8) per stop string
STOP_WIDTHS = (8, MAX_STOP_BYTES)  # the stop table's byte widths (one decode program each)
MAX_STOP_TABLES = 8        # stop tuples whose tables are kept


def check_stop_bounds(stop: Sequence[str]) -> None:
  """At most MAX_STOPS strings of at most MAX_STOP_BYTES bytes each (a ValueError naming it)."""
  if len(stop) > MAX_STOPS:
    raise ValueError(f"stop takes at most {MAX_STOPS} strings, got {len(stop)}")
  for i, s in enumerate(stop):
    n = len(s.encode("utf-8"))
    if n > MAX_STOP_BYTES:
      raise ValueError(f"stop[{i}] is {n} bytes long (UTF-8), more than the limit "
                       f"{MAX_STOP_BYTES}")


class LocalChatModel:
  """See the module docstring."""

  def __init__(self, cfg: DecoderConfig, params, tokenizer, *, name: str = "ragjax-local",
               max_batch: int = 16, max_prompt_tokens: int = 1024, max_new_tokens: int = 512,
               eos_ids: Optional[Sequence[int]] = None, use_chat_template: Optional[bool] = None,
               seed: int = 0, mesh=None, max_samplers: int = 8):
    if tokenizer is None:
      raise ValueError("tokenizer is required (prompts are text)")
    for field, v in (("max_batch", max_batch), ("max_prompt_tokens", max_prompt_tokens),
                     ("max_new_tokens", max_new_tokens), ("max_samplers", max_samplers)):
      if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{field} must be a positive int, got {v!r}")
    if use_chat_template and not has_chat_template(tokenizer):
      raise ValueError("use_chat_template=True but the tokenizer has no chat_template")
    self.cfg, self.params, self.tokenizer, self.name = cfg, params, tokenizer, name
    self.max_batch, self.max_prompt_tokens = max_batch, max_prompt_tokens
    self.max_new_tokens, self.mesh, self.max_samplers = max_new_tokens, mesh, max_samplers
    self.chat = has_chat_template(tokenizer) if use_chat_template is None else use_chat_template
    self.eos_ids = tuple(int(e) for e in (cfg.eos_ids if eos_ids is None else eos_ids))
    self.seed = int(seed)
    self.prompt_buckets = _powers_of_two(min(32, max_prompt_tokens), max_prompt_tokens)
    self.batch_buckets = _powers_of_two(1, max_batch)
    self._samplers: collections.OrderedDict = collections.OrderedDict()
    self._warm: dict = {}                   # (budget, greedy) -> the programs it has run
    self._stop_tables: collections.OrderedDict = collections.OrderedDict()
    self._token_bytes = None
    self._stop_lock = threading.Lock()
    self._lock = threading.Lock()
    self._tok_lock = threading.Lock()       # encode is called from server threads
    self.calls = self.decode_calls = self.rows = 0

  @classmethod
  def from_checkpoint(cls, model_dir: str, *, name: Optional[str] = None,
                      dtype: Optional[str] = None, **kw) -> "LocalChatModel":
    """Loads an HF Llama/Qwen2 directory or a `.gguf` file, and its tokenizer
    (`ragjax.models.hf_io`); a missing or damaged one is refused before any weight is read."""
    if not is_gguf(model_dir) and not os.path.exists(model_dir):
      raise ValueError(f"checkpoint directory {model_dir!r} does not exist")
    check_decoder_dir(model_dir)
    overrides = {"dtype": dtype} if dtype else {}
    cfg, params = load_decoder(model_dir, **overrides)
    tok = load_tokenizer(model_dir)
    default = os.path.basename(os.path.normpath(model_dir))
    if is_gguf(default):
      default = default[:-len(GGUF_SUFFIX)]
    return cls(cfg, params, tok, name=name or default, **kw)

  # ---- prompts ----
  def prompt_text(self, messages: Sequence[Message]) -> str:
    msgs = check_messages(messages)
    if self.chat:
      return render_chat(self.tokenizer, msgs)
    return "\n\n".join(m["content"] for m in msgs)

  def encode(self, messages: Sequence[Message], where: str = "messages") -> list[int]:
    """The prompt token ids of one conversation; `PromptTooLong` past `max_prompt_tokens`.
    Message content is text: a special-token string in it (`<|im_end|>`) stays text, only the
    chat template's own markers (and a base model's BOS) are control tokens."""
    msgs = check_messages(messages)
    with self._tok_lock:
      if self.chat:
        ids = chat_prompt_ids(self.tokenizer, msgs)
      else:
        ids = list(self.tokenizer("\n\n".join(m["content"] for m in msgs),
                                  add_special_tokens=True, split_special_tokens=True)["input_ids"])
    if not ids:
      raise ValueError(f"{where}: the prompt is empty")
    if len(ids) > self.max_prompt_tokens:
      raise PromptTooLong(f"{where}: the prompt has {len(ids)} tokens, more than this model's "
                          f"max_prompt_tokens={self.max_prompt_tokens}")
    return ids

  # ---- decoding ----
  def _budget(self, max_tokens: int) -> int:
    b = 16
    while b < max_tokens:
      b *= 2
    return min(b, self.max_new_tokens)

  def _sampler_config(self, budget: int, greedy: bool) -> SamplerConfig:
    return SamplerConfig(
        max_cache_length=self.max_prompt_tokens + budget, max_new_tokens=budget,
        prompt_buckets=self.prompt_buckets, extend_buckets=(min(16, self.max_prompt_tokens),),
        greedy=greedy, temperature=1.0, top_p=1.0, eos_ids=self.eos_ids, pad_id=0,
        forbid_stop_overhang=False)

  def _sampler(self, budget: int, greedy: bool) -> Sampler:
    key = (budget, greedy)
    s = self._samplers.get(key)
    if s is not None:
      self._samplers.move_to_end(key)
      return s
    s = Sampler(self.cfg, self.params, self.tokenizer, self._sampler_config(budget, greedy),
                mesh=self.mesh, stop_rows=MAX_STOPS)
    self._samplers[key] = s
    self._warm[key] = set()
    while len(self._samplers) > self.max_samplers:
      old, _ = self._samplers.popitem(last=False)
      self._warm.pop(old, None)
    return s

  # ---- which calls compile ----
  def _programs(self, prompts: Sequence[Sequence[int]], budget: int, greedy: bool,
                top_p: float, stop_width: int) -> list[tuple]:
    """One key per batch chunk of a call, at least as fine as what selects its compiled
    programs: rows (padded), prompt bucket, the decode's attention window, the stop table's
    width, nucleus or not."""
    config = self._sampler_config(budget, greedy)
    nucleus = not greedy and top_p < 1.0
    keys = []
    for start in range(0, len(prompts), self.max_batch):
      lens = [len(p) for p in prompts[start:start + self.max_batch]]
      rows = next(b for b in self.batch_buckets if b >= len(lens))
      bucket = next((b for b in self.prompt_buckets if b >= max(lens)), max(lens))
      keys.append((rows, bucket, config.attend_window(max(lens) + budget), stop_width,
                   nucleus))
    return keys

  def is_compiled(self, prompts: Sequence[Sequence[int]],
                  max_tokens: Union[int, Sequence[int]] = 256, temperature: float = 0.0,
                  stop: Optional[Sequence[str]] = None, top_p: float = 1.0) -> bool:
    """Whether `generate_tokens` with these arguments runs only programs this model has run
    before (False: it compiles first, for seconds; the server runs such a call off its
    batching thread).  Never True for a call that compiles; may be False for one that does
    not."""
    if not prompts:
      return True
    limits = [max_tokens] if isinstance(max_tokens, int) else list(max_tokens)
    budget, greedy = self._budget(max(limits)), temperature == 0.0
    try:
      width = self.stop_table(stop).shape[1]
    except ValueError:
      return False                          # refused by generate_tokens, wherever it runs
    with self._lock:
      warm = self._warm.get((budget, greedy))
      if warm is None:
        return False
      return all(k in warm for k in self._programs(prompts, budget, greedy, top_p, width))

  def stop_table(self, stop: Sequence[str]) -> np.ndarray:
    """The padded stop table of `stop` (bounded by `check_stop_bounds`), from the cache of
    the last MAX_STOP_TABLES tuples or built now."""
    stop = check_stop(stop)
    check_stop_bounds(stop)
    with self._stop_lock:
      table = self._stop_tables.get(stop)
      if table is not None:
        self._stop_tables.move_to_end(stop)
        return table
      if self._token_bytes is None:
        self._token_bytes = token_bytes(self.tokenizer, self.cfg.vocab_size)
    longest = max((len(s.encode("utf-8")) for s in stop), default=1)
    table = compile_stop_strings(stop, self._token_bytes, rows=MAX_STOPS,
                                 width=next(w for w in STOP_WIDTHS if w >= longest)).table
    with self._stop_lock:
      self._stop_tables[stop] = table
      while len(self._stop_tables) > MAX_STOP_TABLES:
        self._stop_tables.popitem(last=False)
    return table

  def _finish(self, toks: list[int], reason: int, stop_id: int, limit: int, stop: tuple,
              n_prompt: int) -> Completion:
    if len(toks) > limit:
      toks, finish, reason = toks[:limit], "length", -1
    else:
      finish = "stop" if reason in (STOP, EOS) else "length"
    body = toks[:-1] if reason == EOS and toks and toks[-1] in self.eos_ids else toks
    text = self.tokenizer.decode(body, skip_special_tokens=True)
    if reason == STOP and 0 <= stop_id < len(stop):
      cut = text.find(stop[stop_id])
      if cut >= 0:
        text = text[:cut]
    return Completion(text, finish, n_prompt, len(toks))

  def generate_tokens(self, prompts: Sequence[Sequence[int]],
                      max_tokens: Union[int, Sequence[int]] = 256, temperature: float = 0.0,
                      stop: Optional[Sequence[str]] = None, top_p: float = 1.0,
                      seed: Optional[int] = None) -> list[Completion]:
    """Completions of already-encoded prompts; `max_tokens` may differ per row (the batch
    decodes to the largest and each reply is cut to its own)."""
    n = len(prompts)
    limits = [max_tokens] * n if isinstance(max_tokens, int) else list(max_tokens)
    if len(limits) != n:
      raise ValueError(f"max_tokens has {len(limits)} entries for {n} prompts")
    for mt in limits:
      check_sampling(mt, temperature, top_p)
      if mt > self.max_new_tokens:
        raise ValueError(f"max_tokens={mt} exceeds this model's max_new_tokens="
                         f"{self.max_new_tokens}")
    stop = check_stop(stop)
    check_seed(seed)
    table = self.stop_table(stop)
    if not n:
      return []
    greedy = temperature == 0.0
    budget = self._budget(max(limits))
    programs = self._programs(prompts, budget, greedy, top_p, table.shape[1])
    # Under the lock only what is shared: the sampler, its stop strings (this call keeps the
    # device table it installed) and the seed count.  Prefill and decode run outside it, so a
    # call that compiles (on the server's compile thread) does not hold up compiled calls.
    with self._lock:
      sampler = self._sampler(budget, greedy)
      sampler.set_stop_strings(stop, table)
      device_table = sampler.stop_table
      warm = self._warm[(budget, greedy)]
      base_seed = self.seed + self.calls if seed is None else seed
      self.calls += 1
    out: list[Completion] = []
    for start, program in zip(range(0, n, self.max_batch), programs):
      chunk = [list(p) for p in prompts[start:start + self.max_batch]]
      width = next(b for b in self.batch_buckets if b >= len(chunk))
      padded = chunk + [chunk[0]] * (width - len(chunk))
      state = sampler.prefill(padded, samples_per_prompt=1,
                              seed=(base_seed + start) % SEED_RANGE,
                              temperature=None if greedy else float(temperature))
      _, turn = sampler.decode(state, top_p=1.0 if greedy else float(top_p),
                               stop_table=device_table)
      toks = turn.token_lists()
      reasons, stop_ids = np.asarray(turn.stop_reason), np.asarray(turn.stop_id)
      with self._lock:
        self.decode_calls += 1
        self.rows += len(chunk)
        warm.add(program)
      for j, p in enumerate(chunk):
        out.append(self._finish(toks[j], int(reasons[j]), int(stop_ids[j]),
                                limits[start + j], stop, len(p)))
    return out

  def generate(self, messages_list, max_tokens: int = 256, temperature: float = 0.0,
               stop: Optional[Sequence[str]] = None, top_p: float = 1.0,
               seed: Optional[int] = None) -> list[Completion]:
    convs = check_messages_list(messages_list)
    check_sampling(max_tokens, temperature, top_p)
    prompts = [self.encode(m, f"messages_list[{i}]") for i, m in enumerate(convs)]
    return self.generate_tokens(prompts, max_tokens, temperature, stop, top_p, seed)

  def complete(self, messages_list, max_tokens: int = 256, temperature: float = 0.0,
               stop: Optional[Sequence[str]] = None, top_p: float = 1.0,
               seed: Optional[int] = None) -> list[str]:
    """One reply per conversation, in order (see the module docstring).  Sampling draws from
    `seed` (default: the model's seed plus the call count), so a given seed and batch repeat."""
    return [c.text for c in self.generate(messages_list, max_tokens, temperature, stop, top_p,
                                          seed)]
