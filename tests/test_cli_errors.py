"""Bad input at every entry point (issue 26): each command below runs as a real process with a
mistake in it and must exit 2 with one `error:` line naming the thing (the field, the file, the
argument), and no Python traceback.  The figures line (`BAD_INPUTS ...`) is what
RELIABILITY.md records."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = "--config=configs/search_r1.py:tiny"


def cases(tmp):
  """(command after `python -m`, text the error line must contain)."""
  missing, empty, junk = f"{tmp}/missing", f"{tmp}/empty", f"{tmp}/junk.jsonl"
  return [
      (["ragjax.train", TINY, "--config.no_such_field=1"], "no_such_field"),
      (["ragjax.train", TINY, "--config.rl.kl_cof=0.1"], "kl_cof"),
      (["ragjax.train", "--config=configs/nope.py"], "configs/nope.py"),
      (["ragjax.train", "--config=configs/search_r1.py:nosize"], "nosize"),
      (["ragjax.train", TINY, "--config.rl.kl_coef=abc"], "kl_coef"),
      (["ragjax.train", TINY, f"--config.model.checkpoint={missing}",
        f"--config.workdir={tmp}/w"], missing),
      (["ragjax.evaluate", TINY, "--checkpoint", empty], empty),
      (["ragjax.ablate", TINY, "--b", "noname"], "noname"),
      (["ragjax.retrieval.build", "--corpus", f"{missing}.jsonl", "--out", f"{tmp}/i1",
        "--backend", "bm25"], f"{missing}.jsonl"),
      (["ragjax.retrieval.build", "--corpus", junk, "--out", f"{tmp}/i2", "--backend", "bm25"],
       "no usable passages"),
      (["ragjax.retrieval.serve", "--index", missing], missing),
      (["ragjax.retrieval.evaluate", "--index", missing, "--questions", f"{missing}.jsonl"],
       f"{missing}.jsonl"),
      (["ragjax.services.serve", "--checkpoint", missing], missing),
      (["ragjax.services.serve", "--checkpoint", empty], "config.json"),
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
  ]


def test_every_entry_point_reports_bad_input_in_one_line(tmp_path):
  tmp = str(tmp_path)
  os.makedirs(f"{tmp}/empty")
  with open(f"{tmp}/junk.jsonl", "w") as f:
    f.write('not json\n{"id": 1}\n\n')
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
  env.pop("RAGJAX_TRACEBACK", None)
  todo, results = cases(tmp), []
  for i in range(0, len(todo), 4):                  # four processes at a time
    procs = [(cmd, want, subprocess.Popen([sys.executable, "-m", *cmd], cwd=ROOT, env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
             for cmd, want in todo[i:i + 4]]
    for cmd, want, p in procs:
      _, err = p.communicate(timeout=300)
      results.append((cmd, want, p.returncode, err))
  bad = []
  for cmd, want, rc, err in results:
    wants = (want,) if isinstance(want, str) else want
    lines = [l for l in err.splitlines()
             if "error" in l.lower() and all(w in l for w in wants)]
    escaped = any(e in l for l in lines for e in ("\\'", "\\n", '\\"'))
    if rc != 2 or "Traceback" in err or not lines or escaped:
      bad.append((cmd, rc, err[-800:]))
  print(f"\nBAD_INPUTS tried={len(results)} clean_errors={len(results) - len(bad)}")
  assert not bad, bad
