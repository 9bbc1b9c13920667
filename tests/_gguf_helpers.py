"""Tiny GGUF files written with the `gguf` package's GGUFWriter (llama.cpp's own writer): a
random 1-layer decoder with a 32-token byte-less vocabulary, readable by transformers' GGUF
reader, and its damaged variants (issue 65)."""

import numpy as np


def write_tiny_gguf(path: str, arch: str = "llama", hidden: int = 16, heads: int = 2,
                    kv_heads: int = 1, vocab: int = 32, ff: int = 32) -> str:
  """A float32 GGUF of `arch` whose metadata says `hidden` / `heads` / `kv_heads` (a head
  count that does not divide `hidden` makes inconsistent metadata: the tensors use head
  size 4 then)."""
  import gguf
  w = gguf.GGUFWriter(path, arch)
  w.add_block_count(1)
  w.add_context_length(64)
  w.add_embedding_length(hidden)
  w.add_feed_forward_length(ff)
  w.add_head_count(heads)
  w.add_head_count_kv(kv_heads)
  w.add_layer_norm_rms_eps(1e-5)
  w.add_rope_freq_base(10000.0)
  w.add_vocab_size(vocab)
  w.add_tokenizer_model("gpt2")
  w.add_token_list([f"t{i}" for i in range(vocab)])
  w.add_token_types([1] * vocab)
  w.add_token_scores([0.0] * vocab)
  w.add_token_merges([])
  w.add_bos_token_id(0)
  w.add_eos_token_id(1)
  rng = np.random.default_rng(0)
  head = hidden // heads if hidden % heads == 0 else 4
  tensors = {"token_embd.weight": (vocab, hidden), "output_norm.weight": (hidden,),
             "blk.0.attn_norm.weight": (hidden,), "blk.0.attn_q.weight": (heads * head, hidden),
             "blk.0.attn_k.weight": (kv_heads * head, hidden),
             "blk.0.attn_v.weight": (kv_heads * head, hidden),
             "blk.0.attn_output.weight": (hidden, heads * head),
             "blk.0.ffn_norm.weight": (hidden,), "blk.0.ffn_gate.weight": (ff, hidden),
             "blk.0.ffn_up.weight": (ff, hidden), "blk.0.ffn_down.weight": (hidden, ff)}
  for name, shape in tensors.items():
    w.add_tensor(name, rng.standard_normal(shape).astype(np.float32))
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()
  return path


def write_damaged_ggufs(tmp: str) -> None:
  """tiny.gguf and its damaged kin: cut to 1 KiB, only the magic, cut in half (in the tensor
  data), inconsistent metadata (7 heads for hidden 18), an architecture ragjax does not read."""
  tiny = write_tiny_gguf(f"{tmp}/tiny.gguf")
  data = open(tiny, "rb").read()
  for name, part in (("cut1k", data[:1024]), ("magic", data[:4]),
                     ("half", data[:len(data) // 2])):
    with open(f"{tmp}/{name}.gguf", "wb") as f:
      f.write(part)
  write_tiny_gguf(f"{tmp}/bad_heads.gguf", hidden=18, heads=7, kv_heads=7)
  write_tiny_gguf(f"{tmp}/mistral.gguf", arch="mistral")
