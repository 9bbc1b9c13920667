"""Config values checked before any work (issue 56's hunt): each bad value below was accepted
silently (the run trained with it, or failed only after the world, the index and the model
were set up); now `components.validate`, which every recipe runs first, refuses it naming the
field.  In process: `validate` on the tiny Search-R1 config with one override, nothing on disk."""

import os

import pytest

from ragjax.parallel.cpu_threads import pin
from ragjax.wiring import components
from ragjax.wiring.config_files import apply_overrides, load_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def tiny():
  """A fresh copy per test (`apply_overrides` sets fields in place)."""
  cwd = os.getcwd()
  os.chdir(ROOT)
  try:
    yield load_config("configs/search_r1.py:tiny")
  finally:
    os.chdir(cwd)


@pytest.mark.parametrize("override, field", [
    ("optim.lr=-1.0", "lr"),                        # trained downhill on the reward
    ("optim.lr=1e999", "lr"),                       # infinite: diverged after the set-up
    ("optim.b2=1.0", "b2"),
    ("optim.grad_clip=0.0", "grad_clip"),
    ("retriever.timeout=0.0", "retriever.timeout"),
    ("retriever.deadline=-1.0", "retriever.deadline"),
    ("retriever.cache_size=-1", "retriever.cache_size"),
    ("rl.rewards={}", "rl.rewards"),                # every trajectory scored 0
    ("sft.batch_size=0", "batch_size"),
    ("sft.lr=0.0", "lr"),
    ("mesh.tensor=-2", "mesh.tensor"),
    ("world.num_train=0", "world.num_train"),
    ("tokenizer.vocab_size=100", "tokenizer.vocab_size"),
    ("seed=-1", "seed"),
    ("eval.batch_size=0", "eval.batch_size"),
    ("workdir=", "workdir"),
])
def test_a_bad_value_is_refused_naming_its_field(tiny, tmp_path, override, field):
  c = apply_overrides(tiny, [f"workdir={tmp_path}/w", override])
  with pytest.raises(ValueError, match=field.replace(".", r"\.")):
    components.validate(c)
  assert not os.path.exists(f"{tmp_path}/w")


def test_the_tiny_config_itself_passes(tiny, tmp_path):
  components.validate(apply_overrides(tiny, [f"workdir={tmp_path}/w"]))


def test_cpu_threads_below_zero_is_refused():
  with pytest.raises(ValueError, match="cpu_threads"):
    pin(-1)


def test_smollm2_default_pins_its_measured_run():
  """The values of the default run (docs/real_model.md): a cold start (60 SFT steps of 4
  scripted search traces of 800 training questions, adapters on every layer), then GRPO at
  temperature 1.0 over 8 x 8 rollouts of pool questions (unseen by the cold start, retrievable),
  dynamic sampling on the reward, LoRA on the top 8 layers through the adapter-aware forward,
  Search-R1's exact-match reward, lr 1e-3, 24 steps with every step's rollouts dumped, the last
  step's policy; the traces' scripting options at the values of the measured cold start."""
  from ragjax.wiring.config_files import load_config
  c = load_config("configs/smollm2.py")
  assert (c.traces.questions, c.traces.require_retrieved) == (800, True)
  assert (c.traces.answer_think, c.traces.second_search) == ("names", False)
  assert (c.sft.steps, c.sft.batch_size, c.sft.lr, c.sft.warmup_steps) == (60, 4, 3e-4, 5)
  assert dict(c.rl.rewards) == {"search_r1_em": 1.0} and not dict(c.rl.reward_kwargs)
  assert (c.rl.group_size, c.trainer.batch_prompts, c.trainer.num_steps,
          c.trainer.eval_every, c.trainer.keep_best, c.trainer.dump_every) == (
              8, 8, 24, 0, False, 1)
  assert (c.sampler.temperature, c.optim.lr) == (1.0, 1e-3)
  assert c.rl.batch_filter == "filter_groups" and dict(c.rl.batch_filter_kwargs) == dict(
      metric="reward", target_groups=0, max_batches=1)
  assert (c.model.lora.layers, c.model.lora.forward) == (8, "adapter")
  assert dict(c.pool) == dict(retrievable=True, exclude_cold_start=True, pass_k=0,
                              max_questions=0)
  assert (c.data.split.test, c.data.split.dev, c.protocol.max_turns, c.protocol.top_k) == (
      400, 100, 2, 3)
  # the one-GPU variant keeps the rate it was sized with (16x the batch, 4x the steps)
  g = load_config("configs/smollm2.py:gpu")
  assert (g.optim.lr, g.trainer.num_steps, g.trainer.batch_prompts) == (5e-4, 100, 128)


def test_split_files_and_the_corpus_are_checked_before_any_work():
  from ragjax.wiring.components import validate
  from ragjax.wiring.config_files import load_config
  c = load_config("configs/smollm2.py:tiny")
  c.data.split.files = ("/nonexistent/q.jsonl",)
  c.retriever.corpus = ""               # (absent too where ../shared is)
  with pytest.raises(FileNotFoundError, match=r"data.split.files: '/nonexistent/q.jsonl'"):
    validate(c)
  c = load_config("configs/smollm2.py:tiny")
  c.retriever.corpus = "/nonexistent/passages.jsonl"
  with pytest.raises(FileNotFoundError, match="retriever.corpus"):
    validate(c)


def test_plugin_keyword_arguments_are_checked_against_signatures():
  """Issue 55: every kind's config kwargs are checked against the plug-in's signature when the
  config is checked, in one line naming the field and the names the plug-in takes."""
  from ragjax import registry
  from ragjax.rl.run_config import RLConfig
  from ragjax.rollout.protocols import get_protocol
  with pytest.raises(ValueError, match=r"rl.reward_kwargs.search_r1_em.format_scor: not an "
                                       r"argument of reward 'search_r1_em'; it takes: "
                                       r"\['format_score'\]"):
    RLConfig(rewards={"search_r1_em": 1.0}, reward_kwargs={"search_r1_em": {"format_scor": 1}})
  with pytest.raises(ValueError, match=r"rl.reward_kwargs.r3_rag.lamda_form: .*'lambda_form'"):
    RLConfig(rewards={"r3_rag": 1.0}, reward_kwargs={"r3_rag": {"lamda_form": "gamma"}})
  with pytest.raises(ValueError, match=r"rl.behaviour_kwargs.ppdd: .*'ppd'"):
    RLConfig(behaviour="rex_rag", behaviour_kwargs={"ppdd": "ngram"})
  with pytest.raises(ValueError, match=r"rl.batch_filter_kwargs.keep: .*'keep_ratio'"):
    RLConfig(batch_filter="rex_rag", batch_filter_kwargs={"keep": 0.1})
  with pytest.raises(ValueError, match=r"rollout.hooks.rex_rag_clone.pp: .*'p'"):
    registry.check_kwargs("rollout_hook", "rex_rag_clone", {"pp": 1},
                          "rollout.hooks.rex_rag_clone")
  with pytest.raises(ValueError, match=r"protocol.obs_max_token: .*'obs_max_tokens'"):
    get_protocol("world", obs_max_token=3)
  RLConfig(rewards={"search_r1_em": 1.0}, reward_kwargs={"search_r1_em": {"format_score": 0.1}})
  assert get_protocol("world", obs_max_tokens=160).obs_max_tokens == 160
