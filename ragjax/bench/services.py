"""Chat-completions server throughput against the in-process model on the same prompts.

    python -m ragjax.bench.services [--prompts 32] [--max-tokens 32] [--max-batch 16]
        [--hidden 256] [--layers 4] [--repeats 3]

Writes a random Qwen2-shaped checkpoint with a BPE tokenizer trained here (chat template
included) to a temporary directory, then, greedy and on the same prompts:

1. in process: `LocalChatModel.complete(prompts)` (one call, chunked to `--max-batch` rows);
2. server: `python -m ragjax.services.chat_server` in its own process on 127.0.0.1, called by
   `OpenAIChatClient` with every prompt in flight at once (one request per prompt; the server
   batches them), and again with one request at a time (what batching saves).

Each side is warmed up once (compiles), then timed over `--repeats` runs, alternating the two
so both see the same machine load (best run of each kept; one-at-a-time: one run).
`server_overhead_ratio` = in-process requests/s / server requests/s (1.0 = no overhead).
`same_text` checks the server answered exactly the in-process greedy text.  Prints one JSON
line.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from ragjax.bench import serving  # noqa: E402
from ragjax.bench.timing import best_time  # noqa: E402


_TEXT = ["Who founded the Quillport Observatory, and in which year?",
         "The Tessaly River flows through Quillport into the Amber Sea.",
         "Is the student's answer correct? Reply with Yes or No.",
         "Relevance: 0.70 Evaluation: the documents name the founder.",
         "Final Information: Mirela Dunst founded the observatory in 1871."]


def make_checkpoint(out_dir: str, hidden: int, layers: int, seed: int = 0) -> None:
  import jax
  from ragjax.data.tokenizer import EOS, train_tokenizer
  from ragjax.models.model_config import DecoderConfig
  from ragjax.models.decoder import init_params
  from ragjax.models.hf_io import save_decoder
  tok = train_tokenizer(_TEXT * 50, vocab_size=600, added_tokens=(), min_frequency=1)
  cfg = DecoderConfig(arch="qwen2", vocab_size=len(tok), hidden_size=hidden,
                      intermediate_size=hidden * 2, num_layers=layers, num_heads=4,
                      num_kv_heads=2, head_dim=hidden // 4, rope_theta=10_000.0,
                      tie_word_embeddings=True, max_position_embeddings=4096,
                      eos_token_id=tok.convert_tokens_to_ids(EOS))
  params = init_params(cfg, jax.random.PRNGKey(seed))
  save_decoder(out_dir, cfg, params, tokenizer=tok)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--prompts", type=int, default=32)
  ap.add_argument("--max-tokens", type=int, default=32)
  ap.add_argument("--max-batch", type=int, default=16)
  ap.add_argument("--max-wait-ms", type=float, default=5.0)
  ap.add_argument("--hidden", type=int, default=256)
  ap.add_argument("--layers", type=int, default=4)
  ap.add_argument("--repeats", type=int, default=3)
  args = ap.parse_args(argv)
  import requests
  import jax
  from ragjax.services.http_client import OpenAIChatClient
  from ragjax.services.local import LocalChatModel

  prompts = [[{"role": "system", "content": "You are a careful judge."},
              {"role": "user", "content": f"{_TEXT[i % len(_TEXT)]} (case {i})"}]
             for i in range(args.prompts)]
  with tempfile.TemporaryDirectory(prefix="bench_services_") as ckpt:
    make_checkpoint(ckpt, args.hidden, args.layers)
    model = LocalChatModel.from_checkpoint(ckpt, name="bench", max_batch=args.max_batch,
                                           max_prompt_tokens=256, max_new_tokens=args.max_tokens)
    kw = dict(max_tokens=args.max_tokens, temperature=0.0)
    ref = model.generate(prompts, **kw)                                     # warm-up
    proc, url = serving.start(
        "ragjax.services.chat_server", "--checkpoint", ckpt, "--model-name", "bench", "--max-batch",
        str(args.max_batch), "--max-new-tokens", str(args.max_tokens), "--max-prompt-tokens",
        "256", "--max-wait-ms", str(args.max_wait_ms))
    try:
      batched = OpenAIChatClient(url, "bench", max_concurrency=args.prompts, timeout=300)
      got = batched.complete(prompts, **kw)                                  # warm-up
      before = requests.get(url + "/health", timeout=10).json()
      t_local = t_server = float("inf")
      for _ in range(args.repeats):            # interleaved: both see the same machine load
        t_local = min(t_local, best_time(lambda: model.complete(prompts, **kw), 1))
        t_server = min(t_server, best_time(lambda: batched.complete(prompts, **kw), 1))
      after = requests.get(url + "/health", timeout=10).json()
      serial = OpenAIChatClient(url, "bench", max_concurrency=1, timeout=300)
      serial.complete(prompts[:1], **kw)                                     # warm-up batch 1
      t_serial = best_time(lambda: serial.complete(prompts, **kw), 1)
    finally:
      serving.stop(proc)
  n = args.prompts
  tokens = sum(c.completion_tokens for c in ref)
  out = {
      "bench": "services", "device": jax.devices()[0].device_kind, "prompts": n,
      "max_tokens": args.max_tokens, "max_batch": args.max_batch, "hidden": args.hidden,
      "layers": args.layers, "params": model.cfg.num_params(), "completion_tokens": tokens,
      "in_process_requests_per_s": round(n / t_local, 2),
      "server_requests_per_s": round(n / t_server, 2),
      "server_overhead_ratio": round((n / t_local) / (n / t_server), 3),
      "server_decode_batches_per_run": round((after["batches"] - before["batches"])
                                             / args.repeats, 2),
      "server_one_at_a_time_requests_per_s": round(n / t_serial, 2),
      "same_text": got == [c.text for c in ref],
  }
  print(json.dumps(out))


if __name__ == "__main__":
  main()
