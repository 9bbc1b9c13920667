"""configs/ur2.py: every argument builds, the paper's hyperparameters per variant (§A4.3,
§A3.3), the Stage-1 config the recipe derives, and the real sizes' memory plans on the
paper's 8 x A100 (`python -m ragjax.train --dry_run`)."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "configs"))
import ur2 as ur2_config  # noqa: E402

from ragjax.parallel.memory import parse_target  # noqa: E402
from ragjax.recipes import ur2 as recipe  # noqa: E402
from ragjax.planning.dry_run import memory_plan  # noqa: E402
from ragjax.rl.run_config import parse_run_config  # noqa: E402

REAL = [a for a in ur2_config.ARGS if a not in ("tiny", "world") and "smollm2" not in a]


@pytest.mark.parametrize("arg", REAL)
def test_real_sizes_fit_the_papers_hardware(arg):
  c = ur2_config.get_config(arg)
  assert c.hardware == "a100x8"
  plan = memory_plan(c, parse_target(c.hardware))
  assert plan.fits, plan.table()


def test_paper_hyperparameters_per_variant():
  q7 = ur2_config.get_config("qwen2.5-7b-math-qa")
  run = parse_run_config(q7)
  assert (run.rl.advantage, run.rl.group_size, run.rl.kl_coef, run.rl.clip_low) == \
      ("reinforce_pp_baseline", 16, 0.0, 0.2)
  assert run.rl.loss_agg == "seq-mean-token-mean" and run.rl.mini_batch_size == 256
  assert (run.optim.lr, run.optim.schedule, run.optim.min_lr_ratio, run.optim.b2) == \
      (2e-6, "cosine", 0.1, 0.95)
  assert q7.trainer.batch_prompts == 64 and q7.sampler.top_p == 0.9
  assert dict(q7.rl.rewards) == {"ur2_answer": 1.0, "ur2_format": 1.0, "ur2_fallback": 1.0}
  assert q7.ur2.stage1.mode == "full" and q7.ur2.stage1.num_steps == 10
  assert dict(q7.ur2.stage1.reward_kwargs.ur2_retrieval) == {"one": 3.0, "many": 4.0}
  q3 = ur2_config.get_config("qwen2.5-3b-math-qa")
  assert q3.trainer.batch_prompts == 128 and q3.rl.mini_batch_size == 512
  assert q3.ur2.stage1.num_steps == 15
  assert dict(q3.ur2.stage1.reward_kwargs.ur2_retrieval) == {"one": 5.0, "many": 7.0}
  ll = ur2_config.get_config("llama-3.1-8b-math-qa")
  assert dict(ll.ur2.stage1.reward_kwargs.ur2_retrieval) == {"one": 3.0, "many": 3.0}
  assert ll.rl.reward_kwargs.ur2_format.family == "llama"
  assert ll.data.stages.ur2_curriculum.substitute.to_dict() == {"math": {"hard": "easy"}}
  mcq = ur2_config.get_config("qwen2.5-7b-mcq")
  assert mcq.ur2.stage1.mode == "off" and mcq.protocol.task == "mcq"
  assert dict(mcq.rl.reward_kwargs.ur2_retrieval) == {"one": 0.5, "many": 1.0, "steps": 10}
  weak = ur2_config.get_config("qwen2.5-7b-math-qa-weak")
  assert weak.ur2.stage1.mode == "off" and "ur2_retrieval" in weak.rl.rewards


def test_protocol_task_override_reaches_the_rewards():
  """`--config.protocol.task=mcq` on the command line (ml-collections' own flag parser, as
  `python -m ragjax.train` reads it) changes the default task the Stage-1 and Stage-2 rewards
  score a record without its own task by (it was copied by value before)."""
  from absl import flags
  from ml_collections import config_flags
  argv = ["prog", f"--config={os.path.join(ROOT, 'configs', 'ur2.py')}:qwen2.5-7b-math-qa",
          "--config.protocol.task=mcq"]
  fv = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, "", flag_values=fv, sys_argv=argv)
  fv(argv)
  c = fv.config
  run = parse_run_config(c)
  assert run.rl.reward_kwargs["ur2_answer"]["task"] == "mcq"
  assert run.rl.reward_kwargs["ur2_format"]["task"] == "mcq"
  c1 = recipe.stage1_config(c)
  assert c1.rl.reward_kwargs.ur2_format.task == "mcq"
  # and the reward reads it: a record without a task is scored as multiple choice (letter
  # "A" right: 2); as QA the article "a" normalises away (F1 0)
  from ragjax.rl.rewards import RewardContext, combine_rewards
  from ragjax.rollout.trajectory import RowMeta, TurnRecord
  row = RowMeta(row=0, group_id=0, prompt_index=0, sample_index=0, answer="A",
                turns=[TurnRecord(turn=0, action="answer", text="the correct answer is: A")],
                extra={"fallbacks": 0})
  ex = {"id": "r", "question": "q?", "golden_answers": ["A"], "retrieval": False}
  score = lambda kw: combine_rewards({"ur2_answer": 1.0}, RewardContext(row, ex, 1), kw).total
  assert score({k: dict(v) for k, v in run.rl.reward_kwargs.items()}) == 2.0
  default = parse_run_config(ur2_config.get_config("qwen2.5-7b-math-qa"))
  assert score({k: dict(v) for k, v in default.rl.reward_kwargs.items()}) == 0.0


def test_paper_services_sources_and_turn_budgets():
  """Real sizes name the paper's summarisers and math judge and refuse to start without their
  endpoints (each switched off by one field); turn budgets per task; the MCQ run draws its
  four sources with their own counts."""
  c = ur2_config.get_config("qwen2.5-7b-math-qa")
  assert (c.ur2.knowledge.summariser.model, c.ur2.knowledge.math_summariser.model,
          c.judge.kind, c.judge.model) == ("gpt-4.1-mini-2025-04-14", "Qwen3-32B", "url",
                                           "gpt-4.1-mini-2025-04-14")
  with pytest.raises(ValueError, match="summariser \\(the paper's: gpt-4.1-mini-2025-04-14\\)"):
    recipe.check_services(c)
  c.ur2.knowledge.summariser.url = "http://127.0.0.1:9/v1"
  with pytest.raises(ValueError, match="math_summariser \\(the paper's: Qwen3-32B\\)"):
    recipe.check_services(c)
  c.ur2.knowledge.math_summariser.model = ""
  with pytest.raises(ValueError, match="math judge .*gpt-4.1-mini"):
    recipe.check_services(c)
  c.judge.url = "http://127.0.0.1:9/v1"
  recipe.check_services(c)
  c.judge.kind, c.ur2.knowledge.mode = "", "raw"
  recipe.check_services(ur2_config.get_config("tiny"))
  c.ur2.knowledge.math_summariser.update(dict(model="Qwen3-32B", url="http://127.0.0.1:8/v1"))
  assert sorted(recipe.summariser(c)) == ["default", "math"]
  from ragjax.rollout.factory import protocol_from_config
  from ragjax.rollout.protocols import PromptInput
  proto = protocol_from_config(c)
  assert [proto.turn_budget(PromptInput("q", task=t)) for t in ("qa", "mcq", "math")] == \
      [512, 1536, 3072]
  assert c.sampler.max_new_tokens == 3072
  mcq = ur2_config.get_config("qwen2.5-7b-mcq")
  assert mcq.data.stages.ur2_curriculum.counts.to_dict() == {
      "mcq:medicine": 3000, "mcq:philosophy": 2000, "mcq:history": 2000, "mcq:economics": 2000}
  assert mcq.judge.kind == "" and mcq.sampler.max_new_tokens == 1536
  assert recipe.parse_file_spec("mcq/medicine:/d/m.jsonl") == ("mcq", "mcq", "/d/m.jsonl")
  assert recipe.file_source("mcq/medicine:/d/m.jsonl") == "medicine"
  assert ur2_config.get_config("tiny").protocol.turn_tokens is None


def test_stage1_config_is_the_stage1_run():
  c = ur2_config.get_config("qwen2.5-7b-math-qa")
  c1 = recipe.stage1_config(c)
  assert dict(c1.rl.rewards) == {"ur2_format": 1.0, "ur2_retrieval": 1.0, "ur2_fallback": 1.0}
  assert c1.rl.reward_kwargs.ur2_format.mode == "stage1"
  assert c1.trainer.num_steps == 10 and c1.workdir.endswith(os.path.join("ur2_qwen2.5-7b-math-qa",
                                                                          "stage1"))
  stage = c1.data.stages.ur2_curriculum
  assert tuple(stage.keep) == ("very_hard",) and tuple(stage.tasks) == ("math",)
  # the schedule spans OpenRLHF's max_steps: 10,000 episodes x 6,000 x 16 / 256 updates
  assert c1.optim.total_steps == c.optim.total_steps == 10000 * 375
  assert parse_run_config(c1).rl.mini_batch_size == 256
  assert recipe.parse_file_spec("qa:verl:/d/x.parquet") == ("qa", "verl", "/d/x.parquet")
  assert recipe.parse_file_spec("math:/d/x.jsonl") == ("math", "math", "/d/x.jsonl")
  with pytest.raises(ValueError, match="TASK\\[/SOURCE\\]:\\[FORMAT:\\]PATH"):
    recipe.parse_file_spec("/d/x.jsonl")
  with pytest.raises(ValueError, match="unknown config argument"):
    ur2_config.get_config("qwen2.5-7b-mcq-weak")


def test_knowledge_access_from_config(tmp_path):
  """ur2.knowledge: raw passages routed by task, the summarising proxy in process over the
  routes, a served proxy (its /health names a summariser), or a clear error."""
  from _retrieval_helpers import write_jsonl
  from _rollout_helpers import PASSAGES
  from ragjax.retrieval.index import build_index
  from ragjax.retrieval.routing import RoutedRetriever
  from ragjax.retrieval.server import make_app
  from ragjax.wiring import components as parts
  from ragjax.services.proxy import SummarisingRetriever
  from ragjax.services.chat_server import ServerThread
  corpus = write_jsonl(str(tmp_path / "c.jsonl"),
                       [{"id": i, "contents": f'"{t}"\n{x}'} for i, t, x in PASSAGES])
  for name in ("full", "abstracts"):
    build_index(corpus, str(tmp_path / name), "bm25")
  c = ur2_config.get_config("qwen2.5-7b-math-qa")
  c.retriever.index = str(tmp_path / "full")
  c.ur2.knowledge.routes.qa = str(tmp_path / "abstracts")
  setup = parts.Setup({}, None)
  c.ur2.knowledge.mode = "raw"
  raw = recipe.open_knowledge(c, str(tmp_path), setup)
  assert isinstance(raw, RoutedRetriever) and sorted(raw.routes) == ["default", "qa"]
  c.ur2.knowledge.mode = "summary"
  c.ur2.knowledge.summariser.url = "http://127.0.0.1:9/v1"
  summ = recipe.open_knowledge(c, str(tmp_path), setup)
  assert isinstance(summ, SummarisingRetriever) and summ.inner.routes.keys() == raw.routes.keys()
  assert summ.mode == "strong" and summ.task == "qa"
  c.ur2.knowledge.summariser.url = ""
  with pytest.raises(ValueError, match="needs a summariser"):
    recipe.open_knowledge(c, str(tmp_path), setup)
  # a served proxy: the trainer only forwards contexts to it
  from ragjax.retrieval.index import open_index
  proxy = SummarisingRetriever(open_index(str(tmp_path / "full")), object(), max_tokens=8)
  with ServerThread(make_app(proxy, 3, {"summariser": "x"})) as srv:
    c.retriever.index, c.retriever.url = "", srv.url
    with pytest.raises(ValueError, match="give the routes to the proxy"):
      recipe.open_knowledge(c, str(tmp_path), setup)
    c.ur2.knowledge.routes.qa = ""
    served = recipe.open_knowledge(c, str(tmp_path), setup)
  assert served.url == srv.url + "/retrieve"
