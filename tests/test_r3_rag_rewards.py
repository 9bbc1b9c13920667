"""R3-RAG's rewards and step-level GAE against hand-computed values from the spec
(seeds_rex_autorefine_r3.md §3.3-3.4): each reward term, the judges' parse / failure paths, and
a 3-step trajectory ending correct / incorrect / failed / malformed -> its exact per-step
rewards and, as step samples, its exact advantages (no value bootstraps across steps)."""

import os
import sys

import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_services_fixtures import ScriptedChat  # noqa: E402

from ragjax.rl import advantages as adv_lib  # noqa: E402
from ragjax.rl.rewards import RewardContext, get_reward, score_rows  # noqa: E402
from ragjax.rl.rewards.r3_rag import outcome_of, step_rewards  # noqa: E402
from ragjax.rl.masks import loss_mask  # noqa: E402
from ragjax.rollout.labels import Source  # noqa: E402
from ragjax.rl.step_samples import prefix_samples, sample_rewards, step_samples  # noqa: E402
from ragjax.rl.token_rewards import place_rewards  # noqa: E402
from ragjax.rollout.trajectory import (RolloutBatch, RowMeta, TrajectoryMeta, TurnRecord,  # noqa: E402
                                       assemble)
from ragjax.services.chat_model import ChatServiceError  # noqa: E402
from ragjax.services.r3_judges import acc_match, answer_correct, step_relevance  # noqa: E402

P, POL, RET, ENV = int(Source.PROMPT), int(Source.POLICY), int(Source.RETRIEVED), int(Source.ENV)
Q = "Who founded the Quillport Observatory?"
S1 = ("Step 1:\nThe problem analysis: I need the founder of the observatory.\n"
      "The retrieval query: Quillport Observatory founder")
S2 = "Step 2:\nThe problem analysis: check her birth town.\nThe retrieval query: Mirela Dunst"
S3_ANSWER = "Step 3:\nThe problem analysis: the documents name her.\nThe final answer: {}"
S3_SEARCH = "Step 3:\nThe problem analysis: still unsure.\nThe retrieval query: Dunst family"
DOC_A, DOC_B = '"Mirela Dunst"\nMirela Dunst founded the observatory.', '"Quillport"\nA town.'


def judge_reply(relevance: dict, verdicts: dict):
  """Relevance by the step's query, True/False by the given answer."""
  def reply(messages):
    text = messages[-1]["content"]
    if "[Search Query]" in text:
      q = text.split("[Search Query]\n")[1].split("\n")[0]
      return relevance[q]
    given = text.split("Given Answer: ")[-1].split("\n")[0]
    return f"Correctness analysis: ...\nFinal answer: {verdicts[given]}"
  return reply


def trajectory(last: str, answer=None, stop="answer"):
  """The record of a 3-step trajectory, as the engine writes it."""
  turns = [TurnRecord(0, "search", S1, 0, 0, query="Quillport Observatory founder",
                      doc_texts=(DOC_A, DOC_B)),
           TurnRecord(1, "search", S2, 0, 0, query="Mirela Dunst", doc_texts=(DOC_B,))]
  if answer is not None:
    turns.append(TurnRecord(2, "answer", S3_ANSWER.format(answer)))
  elif last == "search":
    turns.append(TurnRecord(2, "search", S3_SEARCH, query="Dunst family", doc_texts=()))
  else:
    turns.append(TurnRecord(2, "end", "Step 3:\nI do not know", reason="format_no_analysis"))
  return RowMeta(row=0, group_id=0, prompt_index=0, sample_index=0, answer=answer,
                 stop_reason=stop, turns=turns)


REL = {"Quillport Observatory founder": "Relevance: 0.50\nEvaluation: ...",
       "Mirela Dunst": "Relevance: 0.25", "Dunst family": "Relevance: 1.00"}
# outcome -> (row, per-step rewards by hand), Rel = (0.5, 0.25[, 1.0]).  The paper's Eq. 4 with
# lambda_T = gamma (§3.3: negative on incorrect and failed trajectories, 1 on format errors).
CASES = {
    "correct": (trajectory("answer", "Mirela Dunst"), [0.3, 0.15, 2.0]),       # 0.6 x Rel
    "incorrect": (trajectory("answer", "Quillport"), [-0.1, -0.05, 0.0]),      # -0.2 x Rel
    "fail": (trajectory("search", stop="max_turns"), [-0.05, -0.025, -0.1]),   # -0.1 x Rel
    "format": (trajectory("end", stop="format_no_analysis"), [0.5, 0.25, -0.9]),
}
# The released code's lambda_T = 1 + gamma (lambda_form="one_plus_gamma").
CODE = {"correct": [0.8, 0.4, 2.0], "incorrect": [0.4, 0.2, 0.0], "fail": [0.45, 0.225, 0.9],
        "format": [0.5, 0.25, -0.9]}


def score(row, chat, **kw):
  ctx = RewardContext(row, {"question": Q, "golden_answers": ["Mirela Dunst", "M. Dunst"]}, 0,
                      {"judge": chat})
  return score_rows({"r3_rag": 1.0}, [ctx], {"r3_rag": kw})[0]


@pytest.mark.parametrize("outcome", list(CASES))
def test_three_step_trajectory_rewards_by_hand(outcome):
  row, want = CASES[outcome]
  chat = ScriptedChat(judge_reply(REL, {"Quillport": False}))
  result = score(row, chat)
  assert outcome_of(row, outcome == "correct") == outcome
  np.testing.assert_allclose(result.per_step, want, atol=1e-9)
  assert result.total == pytest.approx(sum(want))
  assert row.extra["r3"]["outcome"] == outcome
  # the judge read the RL prompt, the step's analysis, query and documents (cut to 512)
  rel_prompt = next(m[-1]["content"] for m in chat.seen if "[Search Query]" in m[-1]["content"])
  assert f"[Problem]\nThe question: {Q}\n" in rel_prompt
  assert "[Current Analysis]\nI need the founder of the observatory.\n" in rel_prompt
  assert f"[Retrieved Documents]\n{DOC_A}\n{DOC_B}\n" in rel_prompt
  # one request batch per judge: the correct answer matched the string (no answer request)
  asked = [m[-1]["content"] for m in chat.seen if "Given Answer" in m[-1]["content"]]
  assert len(asked) == (1 if outcome == "incorrect" else 0)
  code = score(row, ScriptedChat(judge_reply(REL, {"Quillport": False})),
               lambda_form="one_plus_gamma")
  np.testing.assert_allclose(code.per_step, CODE[outcome], atol=1e-9)


def test_the_judge_reads_the_documents_as_the_policy_saw_them():
  """doc_cut="each" (the paper: every document cut to 512 characters) vs "joined" (the code:
  the step's joined string cut); here at 10 characters."""
  row, _ = CASES["correct"]
  seen = {}
  for cut in ("each", "joined"):
    chat = ScriptedChat(judge_reply(REL, {}))
    score(row, chat, doc_cut=cut, doc_chars=10)
    seen[cut] = next(m[-1]["content"] for m in chat.seen if "[Search Query]" in m[-1]["content"])
  assert f"[Retrieved Documents]\n{DOC_A[:10]}\n{DOC_B[:10]}\n" in seen["each"]
  assert f"[Retrieved Documents]\n{(DOC_A + chr(10) + DOC_B)[:10]}\n" in seen["joined"]
  with pytest.raises(ValueError, match="lambda_form must be one of"):
    score(row, ScriptedChat(judge_reply(REL, {})), lambda_form="sign")


def test_without_process_reward_and_match_only_ablations():
  row, _ = CASES["correct"]
  chat = ScriptedChat(judge_reply(REL, {}))
  assert score(row, chat, process=False).per_step == [0.0, 0.0, 2.0]
  assert chat.calls == 0                       # a string match needs no judge at all
  wrong, _ = CASES["incorrect"]
  # Acc_model can turn a non-matching answer correct; the match-only ablation cannot
  yes = ScriptedChat(judge_reply(REL, {"Quillport": True}))
  assert score(wrong, yes).per_step[-1] == 2.0
  assert score(wrong, yes, answer_judge=False).per_step[-1] == 0.0


def test_judge_failures_fall_back_and_unparsed_replies_score_zero():
  class Down:
    calls = 0

    def complete(self, messages_list, **kw):
      raise ChatServiceError("judge down", partial=[None] * len(messages_list))

  items = [(f"The question: {Q}", "I need the founder of the observatory.", "q", [DOC_A]),
           (f"The question: {Q}", " ".join(["w"] * 31), "q", [])]
  rel, stats = step_relevance(Down(), items)
  # heuristic: 0.3*(0.5: 7 words <= 15) + 0.4*(0.6: <= 30) + 0.3*(docs) = 0.69; 31 words, no docs
  assert rel == [pytest.approx(0.69), pytest.approx(0.7)] and stats["failed"] == 2
  rel, stats = step_relevance(ScriptedChat(lambda m: "I cannot rate this."), items[:1])
  assert rel == [0.0] and stats["unparsed"] == 1
  ok, stats = answer_correct(Down(), [(f"The question: {Q}", "Dunst", ["Mirela Dunst"])])
  assert ok == [False] and stats["failed"] == 1
  ok, stats = answer_correct(ScriptedChat(lambda m: "no verdict"),
                             [(f"The question: {Q}", "Dunst", ["Mirela Dunst"])])
  assert ok == [False] and stats["unparsed"] == 1


def test_the_judges_ask_within_the_configured_judge_budget():
  """The judges' templates ask for 512 tokens (§3.3); a judge served with a smaller cap
  (`chat_server --max-new-tokens 64`, `--config.judge.max_new_tokens=64`) refused every such request
  (400: every relevance score the heuristic, every Acc_model False), and an in-process judge
  with max_new_tokens=64 raised.  The recipe's judge asks within `judge.max_new_tokens`."""
  import importlib.util
  from test_services_fixtures import local_model
  from ragjax.recipes import r3_rag
  from ragjax.wiring.chat_services import make_chat
  from ragjax.services.chat_model import ReplyBudget
  from ragjax.services.chat_server import ServerThread, make_app
  spec = importlib.util.spec_from_file_location(
      "r3_config", os.path.join(os.path.dirname(os.path.dirname(__file__)), "configs", "r3_rag.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  model = local_model()                                  # max_new_tokens=64
  items = [(f"The question: {Q}", "I need the founder of the observatory.", "q", [DOC_A])]
  answers = [(f"The question: {Q}", "Dunst", ["Mirela Dunst"])]
  with pytest.raises(ValueError, match="exceeds this model's max_new_tokens=64"):
    step_relevance(model, items)
  rel, stats = step_relevance(ReplyBudget(model, 64), items)
  assert stats["failed"] == 0 and len(rel) == 1
  with ServerThread(make_app(model, model_name="judge")) as srv:
    c = mod.get_config("tiny")
    c.judge.update(dict(kind="url", url=srv.url, model="judge", max_new_tokens=64))
    _, stats = step_relevance(make_chat(c, "judge"), items)
    assert stats["failed"] == 1                          # the template's 512: refused
    judge = r3_rag.judge_chat(c)
    _, stats = step_relevance(judge, items)
    assert stats == {"requests": 1, "unparsed": stats["unparsed"], "failed": 0}
    _, stats = answer_correct(judge, answers)
    assert stats["requests"] == 1 and stats["failed"] == 0


def test_acc_match_is_the_codes_literal_match():
  golds = ["Paris", "PARIS"]
  assert acc_match("paris", ["paris"]) and acc_match("paris", golds)      # .capitalize()
  assert acc_match("Paris.", golds)                                        # "." stripped
  assert not acc_match("the Paris", golds) and not acc_match("Paris, France", golds)
  assert not acc_match(None, golds)


def test_reward_needs_the_judge_service():
  row, _ = CASES["incorrect"]
  ctx = RewardContext(row, {"question": Q, "golden_answers": ["Mirela Dunst"]})
  with pytest.raises(KeyError, match="needs the 'judge' service"):
    get_reward("r3_rag")(ctx)
  with pytest.raises(ValueError, match="reward 'r3_rag' failed on records"):
    score_rows({"r3_rag": 1.0}, [ctx])


# --- step samples and GAE ---------------------------------------------------------------------
def stream_batch(step_lens=(3, 2, 2), obs_lens=(2, 1), prompt=2):
  """One stream trajectory [prompt | step | obs | step | obs | step] with its turn records."""
  tokens, labels, turns, records = [], [], [], []
  tokens += [1] * prompt
  labels += [P] * prompt
  turns += [-1] * prompt
  for j, n in enumerate(step_lens):
    start = len(tokens)
    tokens += [10 + j] * n
    labels += [POL] * n
    turns += [j] * n
    records.append(TurnRecord(j, "search" if j < len(step_lens) - 1 else "answer", f"s{j}",
                              start, start + n))
    if j < len(obs_lens):
      tokens += [20 + j] * obs_lens[j]
      labels += [RET] * obs_lens[j]
      turns += [j] * obs_lens[j]
  traj = assemble([dict(tokens=tokens, labels=labels, logprobs=[-0.5] * len(tokens),
                        turns=turns, prompt_len=prompt, group_id=7)], widths=(16,))
  meta = RowMeta(row=0, group_id=7, prompt_index=0, sample_index=0, turns=records)
  return RolloutBatch(traj=traj, meta=TrajectoryMeta(rows=[meta]))


def test_prefix_samples_train_each_step_on_its_own_context():
  batch = stream_batch()
  s = prefix_samples(batch)
  assert list(s.row) == [0, 0, 0] and list(s.turn) == [0, 1, 2]
  lab = np.asarray(s.traj.labels)
  # sample 1: prompt, step 0 (now context), its documents, then step 1 trained; nothing after
  assert lab[1, :10].tolist() == [P, P, P, P, P, RET, RET, POL, POL, 0]
  assert lab[2, :12].tolist() == [P] * 5 + [RET, RET] + [P, P, RET, POL, POL]
  assert list(s.traj.lengths) == [5, 9, 12] and list(s.traj.prompt_lengths) == [2, 7, 10]
  lp = np.asarray(s.traj.sampler_logprobs)
  assert (lp[1] != 0).sum() == 2 and (lp[2] != 0).sum() == 2
  padded = step_samples(batch, multiple=4)
  assert padded.num_samples == 4 and list(padded.row) == [0, 0, 0, -1]
  assert loss_mask(np.asarray(padded.traj.labels))[3].sum() == 0      # trains on nothing


@pytest.mark.parametrize("outcome", ["correct", "incorrect", "fail"])
def test_step_level_gae_by_hand(outcome):
  """Each step is a sample: its reward on its last token, GAE (gamma = lambda = 1) within it.
  A_t = sum of the sample's token rewards from t on, minus V_t; KL 0.01 in the reward."""
  _, per_step = CASES[outcome]
  s = step_samples(stream_batch(), multiple=1)
  mask = loss_mask(np.asarray(s.traj.labels))
  r = place_rewards(sample_rewards(s, [per_step]), mask)
  assert [r[k][mask[k] > 0].tolist() for k in range(3)] == [
      [0, 0, pytest.approx(per_step[0])], [0, pytest.approx(per_step[1])],
      [0, pytest.approx(per_step[2])]]
  values = np.where(mask > 0, 0.1, 0.0).astype(np.float32)
  values[0, 3] = 0.3                                  # step 0's second token
  kl = np.where(mask > 0, 0.5, 0.0).astype(np.float32)  # log pi_old - log pi_ref per token
  adv, ret = adv_lib.gae(jnp.asarray(r - 0.01 * kl * mask), jnp.asarray(values),
                         jnp.asarray(mask), gamma=1.0, lam=1.0)
  adv = np.asarray(adv)
  want = {0: [per_step[0] - 3 * 0.005 - 0.1, per_step[0] - 2 * 0.005 - 0.3,
              per_step[0] - 0.005 - 0.1],
          1: [per_step[1] - 2 * 0.005 - 0.1, per_step[1] - 0.005 - 0.1],
          2: [per_step[2] - 2 * 0.005 - 0.1, per_step[2] - 0.005 - 0.1]}
  for k, w in want.items():
    np.testing.assert_allclose(adv[k][mask[k] > 0], w, atol=1e-6)
  np.testing.assert_allclose(np.asarray(ret)[mask > 0], (adv + values)[mask > 0], atol=1e-6)
  # the same trajectory as one stream sample bootstraps across steps: step 0 sees them all
  whole = loss_mask(np.asarray(stream_batch().traj.labels))
  tr = place_rewards([per_step], whole, [[4, 8, 11]])
  a_whole, _ = adv_lib.gae(jnp.asarray(tr), jnp.zeros_like(jnp.asarray(tr)), jnp.asarray(whole),
                           1.0, 1.0)
  assert float(np.asarray(a_whole)[0, 2]) == pytest.approx(sum(per_step))
