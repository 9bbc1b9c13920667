"""GGUF <-> HF directory, and a ragjax policy as a GGUF file (for llama.cpp and Ollama).

    python -m ragjax.models.gguf_convert SmolLM2-135M-Instruct.Q4_1.gguf OUT_DIR
    python -m ragjax.models.gguf_convert <workdir>/policy policy.gguf [--dtype float16]
        [--tokenizer_gguf SmolLM2-135M-Instruct.Q4_1.gguf]

The direction follows the first argument: a `.gguf` file becomes an HF directory (float32
safetensors, config.json, tokenizer; `--dtype` float32 | bfloat16 | float16), an HF directory
(a Llama decoder, e.g. the `policy/` a qa run exports) becomes one GGUF file (`--dtype`
float16 | float32).  The GGUF's tokenizer is copied from `--tokenizer_gguf` (the file the
policy was trained from: its pre-tokenizer name and token types exactly) or else built from
the directory's own tokenizer (byte-level BPE only).  This module joins `hf_io` (params and HF
tensors) and `gguf_io` (the GGUF format), which never import each other the other way.
"""

from __future__ import annotations

import argparse
import os

from ragjax.models.gguf_io import (GGUF_DTYPES, is_gguf, tokenizer_fields_of_gguf,
                                   tokenizer_fields_of_hf, write_gguf)
from ragjax.models.hf_io import (check_decoder_dir, check_finite, load_decoder, load_tokenizer,
                                 params_to_hf_tensors, save_decoder)
from ragjax.models.model_config import DecoderConfig, decoder_config_to_hf


def export_gguf(path: str, cfg: DecoderConfig, params: dict, *, dtype: str = "float16",
                tokenizer=None, tokenizer_gguf: str = "") -> str:
  """Writes `params` (a Llama decoder) as one GGUF file at `path` (in an existing directory:
  nothing is made before the file is whole), with the tokenizer of `tokenizer_gguf` (copied)
  or of `tokenizer` (built); returns `path`."""
  check_gguf_output(path, dtype)
  if tokenizer_gguf:
    fields = tokenizer_fields_of_gguf(tokenizer_gguf)
  elif tokenizer is not None:
    fields = tokenizer_fields_of_hf(tokenizer)
  else:
    raise ValueError(f"{path}: a GGUF export needs a tokenizer (a tokenizer or a source GGUF)")
  hf_config = decoder_config_to_hf(cfg)
  tensors = params_to_hf_tensors(cfg, params)
  check_finite(path, tensors)
  return write_gguf(path, hf_config, tensors, fields, dtype=dtype,
                    name=os.path.splitext(os.path.basename(path))[0])


def check_gguf_output(path: str, dtype: str) -> None:
  """A GGUF file to write: a `.gguf` name in an existing, writable directory, and a dtype the
  writer takes (checked before any weight is read)."""
  if dtype not in GGUF_DTYPES:
    raise ValueError(f"--dtype {dtype!r}: a GGUF export takes one of {GGUF_DTYPES}")
  if not is_gguf(path):
    raise ValueError(f"{path}: the GGUF file to write must end in .gguf")
  parent = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(parent):
    raise FileNotFoundError(f"{path}: its directory {parent} does not exist")
  if os.path.isdir(path):
    raise IsADirectoryError(f"{path}: is a directory, not a file to write")
  if not os.access(parent, os.W_OK | os.X_OK):
    raise PermissionError(f"{path}: {parent} is not writable")


def hf_dir_to_gguf(model_dir: str, path: str, *, dtype: str = "float16",
                   tokenizer_gguf: str = "") -> str:
  """An HF directory (config.json, safetensors, tokenizer files) as one GGUF file."""
  check_gguf_output(path, dtype)
  cfg, params = load_decoder(model_dir, dtype="float32", param_dtype="float32")
  tokenizer = None if tokenizer_gguf else load_tokenizer(model_dir)
  return export_gguf(path, cfg, params, dtype=dtype, tokenizer=tokenizer,
                     tokenizer_gguf=tokenizer_gguf)


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


def gguf_to_hf_dir(path: str, out_dir: str, *, dtype: str = "float32") -> str:
  """A GGUF file (dequantised by transformers' reader) as an HF directory; the output, the
  dtype and the file's metadata are checked before any tensor is dequantised."""
  from ragjax.models.model_config import as_dtype
  try:
    as_dtype(dtype)
  except ValueError as e:
    raise ValueError(f"--dtype: {e}") from None
  check_output_dir(out_dir)
  check_decoder_dir(path)          # the metadata only: an unreadable file before dequantising
  cfg, params = load_decoder(path)
  save_decoder(out_dir, cfg, params, dtype=dtype, tokenizer=load_tokenizer(path))
  return out_dir


def main(argv=None) -> int:
  from ragjax.errors import exit_on_user_error
  p = argparse.ArgumentParser(description="Convert a GGUF file to an HF directory, or an HF "
                                          "directory to a GGUF file (by the first argument).")
  p.add_argument("source", help="a .gguf file, or an HF directory")
  p.add_argument("out", help="the HF directory, or the .gguf file, to write")
  p.add_argument("--dtype", default=None,
                 help="to HF: float32 (default) | bfloat16 | float16; to GGUF: float16 "
                      "(default) | float32")
  p.add_argument("--tokenizer_gguf", default="",
                 help="to GGUF: copy the tokenizer metadata from this GGUF file (the one the "
                      "policy was trained from) instead of building it from the directory's")
  args = p.parse_args(argv)

  with exit_on_user_error("ragjax.models.gguf_convert"):
    if not is_gguf(args.source) and not os.path.isdir(args.source):
      raise ValueError(f"{args.source}: not a .gguf file or an HF directory" + (
          "" if os.path.exists(args.source) else " (it does not exist)"))
    if is_gguf(args.source):
      gguf_to_hf_dir(args.source, args.out, dtype="float32" if args.dtype is None else args.dtype)
    else:
      if not is_gguf(args.out):
        raise ValueError(f"{args.out}: the GGUF file to write must end in .gguf")
      hf_dir_to_gguf(args.source, args.out,
                     dtype="float16" if args.dtype is None else args.dtype,
                     tokenizer_gguf=args.tokenizer_gguf)
  print(f"wrote {args.out}")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
