"""Protocol pieces on their own: prompts (chat and plain), parsers, answer extraction, labels,
character/token mapping and chat framing."""

import dataclasses
import os
import sys

import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import _rollout_helpers as h  # noqa: E402

from ragjax.models.chat_template import user_turn_framing  # noqa: E402
from ragjax.rl.masks import loss_mask  # noqa: E402
from ragjax.rollout.labels import Source  # noqa: E402
from ragjax.rollout.protocols import (Kind, PromptInput, as_prompt_input,  # noqa: E402
                                      get_protocol)
from ragjax.rollout.protocols import autorefine, ur2  # noqa: E402
from ragjax.rollout.renderer import Renderer  # noqa: E402
from ragjax.rollout.segments import Segment, tokenize_segments  # noqa: E402
from ragjax.rollout.textspan import decode, tokens_covering, tokens_within  # noqa: E402

SR1_EXPECTED = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every "
    "time you get new information. After reasoning, if you find you lack some knowledge, you can "
    "call a search engine by <search> query </search>, and it will return the top searched results "
    "between <information> and </information>. You can search as many times as you want. If you "
    "find no further external knowledge needed, you can directly provide the answer inside <answer> "
    "and </answer> without detailed illustrations. For example, <answer> Beijing </answer>. "
    "Question: who founded it?")


def test_search_r1_prompt_plain_and_chat():
  proto = get_protocol("search_r1")
  base = Renderer(proto, h.tokenizer(chat=False))
  assert not base.chat
  assert base.prompt_text("  who founded it ") == SR1_EXPECTED
  assert base.prompt_ids("who founded it") == h.tokenizer(False)(SR1_EXPECTED)["input_ids"]
  chat = Renderer(proto, h.tokenizer(chat=True))
  assert chat.prompt_text("who founded it?") == (
      f"<|im_start|>user\n{SR1_EXPECTED}<|im_end|>\n<|im_start|>assistant\n")
  # forcing plain prompts on a chat tokenizer is allowed (base models with a template)
  assert Renderer(proto, h.tokenizer(), chat=False).prompt_text("who founded it") == SR1_EXPECTED


def test_other_prompts():
  tok = h.tokenizer()
  ar = Renderer(get_protocol("autorefine"), tok).prompt_text("Who won")
  assert ar.endswith("For example, <answer> Donald Trump </answer>. Question: Who won?\n"
                     "<|im_end|>\n<|im_start|>assistant\n")
  assert "three most relevant documents enclosed in <documents> and </documents>" in ar
  paper = get_protocol("autorefine", template=autorefine.PAPER_TEMPLATE)
  assert paper.user_message(PromptInput("x")).endswith("<user> Question: x? </user>")
  r3 = Renderer(get_protocol("r3_rag"), tok).prompt_text("Who won?")
  assert r3 == ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                "<|im_start|>user\nThe question: Who won?<|im_end|>\n<|im_start|>assistant\n")
  mcq = get_protocol("ur2", task="mcq")
  inp = PromptInput("Which sea?", options=("Amber", "Red"))
  assert mcq.user_message(inp) == "Question: Which sea?\nOptions:\nA. Amber\nB. Red"
  assert mcq.system_message(inp) == ur2.MCQ_RETRIEVAL
  assert mcq.system_message(PromptInput("q", ("a",), retrieval=False)) == ur2.MCQ_COT
  with pytest.raises(ValueError, match="no options"):
    mcq.user_message(PromptInput("Which?"))
  qa = get_protocol("ur2")
  assert qa.messages(PromptInput("Who?")) == [{"role": "system", "content": ur2.QA_RETRIEVAL},
                                             {"role": "user", "content": "Who?"}]
  assert qa.messages(PromptInput("Who?", retrieval=False)) == [
      {"role": "user", "content": "Who?\nPlease reason step by step, and put your final answer "
                                  "within \\boxed{}."}]
  assert get_protocol("ur2", task="math").user_message(PromptInput("1+1")) == "Question: 1+1"
  assert ur2.MATH_COT.startswith("You are sovling a math problem.")    # the code's typo, kept
  with pytest.raises(ValueError, match="task"):
    get_protocol("ur2", task="poetry")


@pytest.mark.parametrize("text,final,kind,query,answer,keep", [
    ("<think>a</think> <search> q1 </search> tail", False, Kind.SEARCH, "q1", None, 38),
    ("<search>q1</search><search>q2</search>", False, Kind.SEARCH, "q1", None, 19),
    ("<answer> A </answer><search>q</search>", False, Kind.ANSWER, None, "A", 20),
    ("<search> q1 </search>", True, Kind.END, "q1", None, 21),
    ("<search> unclosed", False, Kind.INVALID, None, None, None),
    ("<search> unclosed", True, Kind.END, None, None, None),
    ("<search>  </search>", False, Kind.INVALID, None, None, 19),
    ("", False, Kind.INVALID, None, None, None),
    ("<answer></answer>", False, Kind.ANSWER, None, "", 17),
])
def test_search_r1_parser(text, final, kind, query, answer, keep):
  a = get_protocol("search_r1").parse(text, final=final)
  assert (a.kind, a.answer, a.keep) == (kind, answer, keep)
  if kind == Kind.SEARCH:
    assert a.query == query


def test_r3_parser():
  p = get_protocol("r3_rag")
  a = p.parse("Step 1:\nThe problem analysis: x y.\nThe retrieval query: who is Z? more\nStep 2:",
              final=False)
  assert (a.kind, a.query) == (Kind.SEARCH, "who is Z")
  assert a.keep == len("Step 1:\nThe problem analysis: x y.\nThe retrieval query: who is Z? more")
  a = p.parse("Step 2:\nThe problem analysis: ok.\nThe final answer: Quillport\n", final=False)
  assert (a.kind, a.answer) == (Kind.ANSWER, "Quillport")
  # whichever of query and answer comes first wins
  a = p.parse("The problem analysis: a\nThe final answer: B\nThe retrieval query: c", final=False)
  assert (a.kind, a.answer) == (Kind.ANSWER, "B")
  assert p.parse("The problem analysis: a", final=False).reason == "format_no_query_or_answer"
  assert p.parse("The problem analysis: \nThe final answer: B", final=False).kind == Kind.END
  # a last-step query is still a search (R3-RAG retrieves and scores it, then stops)
  assert p.parse("The problem analysis: a\nThe retrieval query: q", final=True).kind == Kind.SEARCH
  header = get_protocol("r3_rag", step_header=True)
  assert header.parse("Step 2:\nThe problem analysis: a\nThe final answer: B", final=False).answer == "B"
  for bad in ("The problem analysis: a\nThe final answer: B",
              "Step 1:\nThe problem analysis: a\nStep 2:\nThe final answer: B"):
    assert header.parse(bad, final=False).reason == "format_step_header"


def test_ur2_parser_and_answers():
  p = get_protocol("ur2")
  a = p.parse('think <|begin_of_query|> a <|begin_of_query|>  the "big"\n river <|end_of_query|>',
              final=False)
  assert (a.kind, a.query) == (Kind.SEARCH, "the big river")
  assert p.parse("x <|end_of_query|>", final=False).kind == Kind.END   # no opening tag
  assert ur2.extract_answer("\\boxed{\\frac{1}{2}} then \\boxed{3}") == "3"
  assert ur2.boxed_contents("a \\boxed{x^{2}} b \\boxed{unclosed") == ["x^{2}"]
  # pattern order, as in the code: a letter answer beats a later \boxed{}
  assert ur2.extract_answer("the correct answer is: C. Also \\boxed{7}") == "C"
  assert ur2.extract_answer("<answer> Quillport </answer>") == "Quillport"
  assert ur2.extract_answer("nothing") == ""
  assert ur2.ur2_documents([]) == "None"
  assert ur2.ur2_documents([{"contents": "12 Title\ntext "}]) == "Title\ntext\n"


def test_rezero_parser():
  p = get_protocol("rezero")
  a = p.parse("<search>a</search> <search> b </search>", final=False)
  assert (a.kind, a.query, a.all_queries) == (Kind.SEARCH, "b", ("a", "b"))
  assert p.parse("<answer>x</answer>", final=False).answer == "x"
  assert p.parse("<answer>x</answer><search>y</search>", final=False).kind == Kind.SEARCH
  assert p.parse("plain", final=False).reason == "no_action"
  assert p.stop_sequences == () and get_protocol("rezero", stop_on_search=True).stop_sequences


def test_registry_and_inputs():
  with pytest.raises(ValueError, match=r"protocol.name: unknown protocol \['nope'\]; registered: "
                                       r"\['autorefine'"):
    get_protocol("nope")
  with pytest.raises(ValueError, match="'question'"):
    as_prompt_input({"q": 1})
  with pytest.raises(TypeError):
    as_prompt_input(3)
  assert as_prompt_input({"question": "x", "options": ["a"]}).options == ("a",)


def test_loss_mask_from_labels():
  labels = np.array([[1, 2, 3, 4, 5, 0], [2, 2, 4, 3, 2, 0]], np.int8)
  np.testing.assert_array_equal(loss_mask(labels), [[0, 1, 0, 0, 0, 0], [0, 1, 0, 0, 1, 0]])
  np.testing.assert_array_equal(loss_mask(labels, ("policy", "injected")),
                                [[0, 1, 0, 1, 0, 0], [0, 1, 1, 0, 1, 0]])   # position 0 never
  np.testing.assert_array_equal(loss_mask(jnp.asarray(labels))[0], [0, 1, 0, 0, 0, 0])
  for bad in ("prompt", "environment", "pad"):
    with pytest.raises(ValueError, match="cannot train on"):
      loss_mask(labels, ("policy", bad))


def test_segments_and_truncation():
  tok = h.tokenizer()
  ids, labels, cut = tokenize_segments(tok, [Segment("\n\n<information>", Source.ENV),
                                             Segment("Doc 1 a long text", Source.RETRIEVED, 3),
                                             Segment("", Source.ENV)])
  head = tok("\n\n<information>", add_special_tokens=False)["input_ids"]
  assert ids[:len(head)] == head and len(ids) == len(head) + 3 and cut
  assert labels == [Source.ENV] * len(head) + [Source.RETRIEVED] * 3
  with pytest.raises(TypeError):
    tokenize_segments(tok, ["raw string"])


@pytest.mark.parametrize("which", ["chatml", "llama3"])
def test_prefetched_observations_tokenise_as_one_by_one(which):
  """`Renderer.prefetch` tokenises a turn's observations in one batched call per kind (plain
  or not) and `tokenize` then reads them: the same ids and labels as segment by segment, special
  tokens in data kept as text, in template text as control ids; no tokenizer call after it."""
  tok = h.tokenizer(True) if which == "chatml" else h.llama3_tokenizer()
  specials = h.SPECIALS if which == "chatml" else h.LLAMA3_SPECIALS
  proto = get_protocol("rezero")                       # user-role observations: chat framing
  lists = [Renderer(proto, tok).wrap_observation(
      proto.observation(q, [{"id": str(i), "contents": f'"T{i}"\n{q} {specials[i % 2]} text'}
                            for i in range(n)]), specials[0])
      for n, q in ((1, "alpha"), (3, "beta gamma"), (2, "alpha"))] + [[]]
  one_by_one = Renderer(proto, tok)
  expect = [one_by_one.tokenize(segs) for segs in lists]
  assert any(s.is_plain for s in lists[0]) and any(not s.is_plain for s in lists[0])
  calls = []

  class Counting:
    def __getattr__(self, name):
      return getattr(tok, name)

    def __call__(self, text, **kw):
      calls.append(text)
      return tok(text, **kw)
  batched = Renderer(proto, tok)
  batched.tokenizer = Counting()
  batched.prefetch(lists)
  assert len(calls) == 2 and all(isinstance(c, list) for c in calls)
  assert [batched.tokenize(segs) for segs in lists] == expect and len(calls) == 2
  special_ids = {tok.convert_tokens_to_ids(t) for t in specials}
  ids, labels, _ = expect[0]
  assert not {i for i, lab in zip(ids, labels) if lab == Source.RETRIEVED} & special_ids
  assert {i for i, lab in zip(ids, labels) if lab == Source.ENV} & special_ids
  assert batched.tokenize([Segment("not prefetched", Source.ENV)])[0] == tok(
      "not prefetched", add_special_tokens=False)["input_ids"] and len(calls) == 3


def test_char_token_mapping_with_split_characters():
  tok = h.tokenizer()
  text = "ab 😀 <answer> é </answer>"
  ids = tok(text, add_special_tokens=False)["input_ids"]
  assert decode(tok, ids) == text
  assert len(ids) > len(text.split())
  for n in range(len(text) + 1):
    k = tokens_covering(tok, ids, text, n)
    assert decode(tok, ids[:k]).startswith(text[:n])
    assert k == 0 or not decode(tok, ids[:k - 1]).startswith(text[:n])
    w = tokens_within(tok, ids, text, n)
    assert text[:n].startswith(decode(tok, ids[:w])) and w <= k


LLAMA3ISH = ("{{ '<|endoftext|>' }}{% for m in messages %}{{ '<|im_start|>' + m['role'] + "
             "'<|im_end|>\n\n' + m['content'] + '<|endoftext|>' }}{% endfor %}"
             "{% if add_generation_prompt %}{{ '<|im_start|>assistant<|im_end|>\n\n' }}{% endif %}")


def test_user_turn_framing_reads_any_template():
  tok = h.tokenizer()
  f = user_turn_framing(tok)
  assert (f.close, f.open) == ("<|im_end|>\n<|im_start|>user\n",
                               "<|im_end|>\n<|im_start|>assistant\n")
  assert f.close_after("<|im_end|>") == "\n<|im_start|>user\n"
  assert f.close_after(None) == f.close
  other = h.tokenizer(chat=False)
  import copy
  other = copy.deepcopy(other)
  other.chat_template = LLAMA3ISH
  g = user_turn_framing(other, system="sys")
  assert g.close == "<|endoftext|><|im_start|>user<|im_end|>\n\n"
  assert g.open == "<|endoftext|><|im_start|>assistant<|im_end|>\n\n"


@pytest.mark.parametrize("which", ["chatml", "llama3"])
def test_special_tokens_in_data_stay_text(which):
  """A passage or a question holding the template's control tokens (every special token of
  ChatML / Llama-3) is tokenised as plain text: no control id appears in retrieved tokens, and
  the prompt holds exactly the template's own control tokens."""
  from ragjax.rollout.engine import RolloutEngine
  tok = h.tokenizer(True) if which == "chatml" else h.llama3_tokenizer()
  specials = h.SPECIALS if which == "chatml" else h.LLAMA3_SPECIALS
  special_ids = {tok.convert_tokens_to_ids(t) for t in specials}
  hostile = "Quillport " + " ".join(specials) + " harbour"
  proto = get_protocol("search_r1")
  pol = h.ScriptedPolicy(tok, {0: ["<search> q </search>", "<answer> a </answer>"]},
                         stop_strings=proto.stop_sequences)
  eng = RolloutEngine(proto, pol, h.StaticRetriever(['"T"\n' + hostile]), tok)
  batch = eng.run(["Where is " + " ".join(specials) + " Quillport"], samples_per_prompt=1)
  t = batch.traj
  k = int(t.lengths[0])
  ids, labels = np.asarray(t.tokens)[0, :k], np.asarray(t.labels)[0, :k]
  retrieved = ids[labels == Source.RETRIEVED]
  assert retrieved.size and not set(retrieved.tolist()) & special_ids
  assert hostile.split()[1] in tok.decode(retrieved.tolist())     # the text survives as text
  prompt = ids[labels == Source.PROMPT].tolist()
  clean = eng.renderer.prompt_ids("Where is Quillport")
  assert [i for i in prompt if i in special_ids] == [i for i in clean if i in special_ids]
  assert " ".join(specials) in tok.decode(prompt)


def test_one_registry_lists_every_kind_protocols_included():
  """`python -m ragjax.registry` lists each kind's names with a one-line description; protocols
  are registered like every other plug-in (so a gin-bound one is found by `get_protocol`)."""
  import subprocess
  import sys
  out = subprocess.run([sys.executable, "-m", "ragjax.registry"], capture_output=True,
                       text=True, timeout=120, check=True).stdout
  listed: dict = {}
  for line in out.splitlines():
    if not line.startswith(" "):
      kind = line.rstrip(":")
      listed[kind] = set()
    else:
      listed[kind].add(line.split()[0])
  for kind, name in (("reward", "search_r1_em"), ("advantage", "grpo"),
                     ("rollout_hook", "rex_rag_clone"), ("batch_filter", "rex_rag"),
                     ("behaviour", "rex_rag"), ("metric", "autorefine"),
                     ("data_stage", "ur2_curriculum"), ("protocol", "search_r1")):
    assert name in listed[kind], (kind, listed.get(kind))
  assert "(no description)" not in out


def test_a_gin_bound_protocol_is_found_by_name():
  import dataclasses
  import gin
  from ragjax.rollout.protocols import SearchR1

  @dataclasses.dataclass(frozen=True)
  class Mine(SearchR1):
    """A user protocol bound through gin."""
    name: str = "mine"

  gin.clear_config()
  try:
    gin.bind_parameter("user_plugins.plugins", {"protocol": {"mine": Mine}})
    assert isinstance(get_protocol("mine", top_k=2), Mine)
  finally:
    gin.clear_config()


def test_demonstration_and_the_direct_answer_protocol():
  from ragjax.rollout.protocols.search_r1 import (DEMO_QUESTION, DEMO_TRAJECTORY,
                                                  SEARCH_R1_TEMPLATE)
  plain = get_protocol("search_r1")
  shown = get_protocol("search_r1", demonstration=True)
  inp = PromptInput("Who wrote Dune")
  asked = plain.messages(inp)
  assert asked == [{"role": "user", "content": SEARCH_R1_TEMPLATE.format(
      example="Beijing", question="Who wrote Dune?")}]
  assert shown.messages(inp) == [
      {"role": "user", "content": SEARCH_R1_TEMPLATE.format(example="Beijing",
                                                            question=DEMO_QUESTION)},
      {"role": "assistant", "content": DEMO_TRAJECTORY}, asked[0]]
  assert shown.plain_prompt(inp).endswith(plain.plain_prompt(inp))
  assert DEMO_TRAJECTORY in shown.plain_prompt(inp)
  # the worked example is itself a valid trajectory of the protocol
  from ragjax.rl.rewards import is_valid_search_r1_format
  assert is_valid_search_r1_format(DEMO_TRAJECTORY)
  direct = get_protocol("direct", demonstration=True)
  assert direct.max_turns == 0 and direct.stop_sequences == ("</answer>",)
  user = direct.messages(inp)[-1]["content"]
  assert "without searching" in user and "<search>" not in user
  assert direct.messages(inp)[1] == {"role": "assistant", "content": "<answer> Argentina </answer>"}
  assert direct.parse("<answer> Frank Herbert </answer>", final=True).answer == "Frank Herbert"
  assert direct.parse("<search> Dune </search>", final=True).kind == Kind.END


def test_search_r1_observation_cap_cuts_the_whole_string_as_the_authors_code():
  """configs/search_r1.py's paper sizes cut the whole `\\n\\n<information>...</information>\\n\\n`
  string at obs_max_tokens, as Search-R1's `_process_next_obs` does (the tokenized string's
  first 500 tokens: a long result loses its closing tag); "documents" cuts the retrieved text
  and keeps both tags."""
  from ragjax.rollout.factory import protocol_from_config
  from ragjax.wiring.config_files import load_config
  tok = h.tokenizer()
  c = load_config("configs/search_r1.py:qwen2.5-3b")
  proto = protocol_from_config(c)
  assert (proto.obs_cap, proto.obs_max_tokens) == ("observation", 500)
  hits = [{"id": str(i), "contents": f'"T{i}"\n' + " ".join(f"w{i}x{j}" for j in range(80))}
          for i in range(3)]
  text = "\n\n<information>" + proto.format_documents(hits).strip() + "</information>\n\n"
  whole = tok(text, add_special_tokens=False)["input_ids"]
  assert len(whole) > 500
  for cap in (500, 37):
    p = dataclasses.replace(proto, obs_max_tokens=cap)
    ids, labels, cut = tokenize_segments(tok, p.observation("q", hits))
    head = tok("\n\n<information>", add_special_tokens=False)["input_ids"]
    assert len(ids) == cap and cut and ids[:len(head)] == head
    assert labels[-1] == Source.RETRIEVED                  # the closing tag was cut
    assert ids == whole[:cap]                              # the whole string's first tokens
    keep = dataclasses.replace(p, obs_cap="documents")
    ids2, labels2, _ = tokenize_segments(tok, keep.observation("q", hits))
    tail = tok("</information>\n\n", add_special_tokens=False)["input_ids"]
    assert ids2[-len(tail):] == tail and labels2.count(Source.RETRIEVED) == cap
  short = dataclasses.replace(proto, obs_max_tokens=5)
  assert len(tokenize_segments(tok, short.invalid_observation())[0]) == 5
  with pytest.raises(ValueError, match="protocol.obs_cap"):
    dataclasses.replace(proto, obs_cap="tags")
