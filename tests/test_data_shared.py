"""Every builder loads the real files in ../shared/data; example counts match its README.

Skips cleanly when the folder is absent (the project ships no copy of the data).
"""

import os

import pytest

from _data_helpers import SHARED_DATA, SHARED_FILES, readme_counts, shared_files, split_name

pytestmark = pytest.mark.skipif(not os.path.isfile(os.path.join(SHARED_DATA, "README.md")),
                                reason="../shared/data is absent")


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory):
  import tensorflow_datasets as tfds
  tfds.disable_progress_bar()
  return str(tmp_path_factory.mktemp("tfds"))


# Files above this many records are counted through the builder's READER only (the same
# code path minus TFDS serialisation), to keep the suite fast on 2 shared cores.
TFDS_MAX_RECORDS = 5000


@pytest.mark.parametrize("builder_name", sorted(SHARED_FILES))
def test_builder_loads_shared_files_with_readme_counts(builder_name, tfds_dir):
  from ragjax.data.builders import BUILDERS, FilesConfig
  from ragjax.data.load import load_split
  counts = readme_counts()
  files = shared_files(builder_name)
  assert files, f"no shared files found for {builder_name}"
  big = [f for f in files if counts.get(f, 0) > TFDS_MAX_RECORDS]
  files = [f for f in files if f not in big]
  cls = BUILDERS[builder_name]
  for f in big:
    assert sum(1 for _ in cls.READER(os.path.join(SHARED_DATA, f), None)) == counts[f], f
  config = FilesConfig(name="shared", files={split_name(f): [os.path.join(SHARED_DATA, f)]
                                             for f in files})
  builder = cls(config=config, data_dir=tfds_dir)
  builder.download_and_prepare()
  for f in files:
    rows = load_split(builder, split_name(f))
    assert f in counts, f"{f} is not in the README table"
    assert len(rows) == counts[f], f
    first, last = rows[0], rows[len(rows) - 1]
    for row in (first, last):
      assert row["question"].strip() and row["golden_answers"] and all(a.strip() for a in row["golden_answers"])
    if builder_name == "ragjax_multiple_choice":
      assert first["options"] and first["golden_answers"][0] in "ABCDEFGHIJ"[:len(first["options"])]
  # Re-opening by registered name + config reads the same prepared files.
  again = load_split(f"{builder_name}/shared", split_name(files[0]), data_dir=tfds_dir)
  assert len(again) == counts[files[0]]


def test_multihop_corpora_keep_supporting_paragraphs():
  """Questions plus their paragraphs as a corpus: every supporting title present (README:
  'gold paras present'), supporting ids point into the corpus with the right titles."""
  from ragjax.data.corpus_builder import CorpusBuilder
  from ragjax.retrieval.corpus_reader import read_passages
  from ragjax.data.hotpotqa import read_hotpotqa
  from ragjax.data.musique import read_musique
  from ragjax.data.twowiki import read_twowiki
  cases = [(read_hotpotqa, "hotpotqa/derived_hotpot_dev_distractor_union_1668.json", 1668),
           (read_twowiki, "2wikimultihopqa/derived_2wiki_dev_with_context_164.json", 164),
           (read_musique, "musique/hipporag_musique_train_100.json", 100)]
  big = {p.contents for p in read_passages(os.path.join(SHARED_DATA, "corpus/derived_multihop_wiki_passages_31144.jsonl"))}
  for reader, rel, gold_present in cases:
    corpus = CorpusBuilder()
    exs = list(reader(os.path.join(SHARED_DATA, rel), corpus=corpus))
    by_id = {p.id: p for p in corpus.passages()}
    complete = [e for e in exs if e.supporting_titles and "supporting_titles_missing" not in e.metadata]
    assert len(complete) == gold_present, rel
    for e in complete:
      assert e.supporting_ids and all(i in by_id for i in e.supporting_ids)
      assert {by_id[i].title for i in e.supporting_ids} == set(e.supporting_titles)
      assert all(by_id[i].contents == f'"{by_id[i].title}"\n{by_id[i].text}' for i in e.supporting_ids)
    # Our paragraph text matches the shared Wikipedia corpus built from the same files.
    gold = {by_id[i].contents for e in complete for i in e.supporting_ids}
    assert len(gold & big) / len(gold) > 0.99, rel
  musique_corpus = list(read_passages(os.path.join(SHARED_DATA, "musique/hipporag_musique_train_100_corpus.json")))
  assert len(musique_corpus) == readme_counts()["musique/hipporag_musique_train_100_corpus.json"]


@pytest.mark.parametrize("rel", ["corpus/derived_multihop_wiki_passages_31144.jsonl",
                                 "corpus/flashrag_wiki18_sample_1000.jsonl",
                                 "corpus/hipporag_2wikimultihopqa_corpus_6119.json"])
def test_read_corpus_counts(rel):
  from ragjax.retrieval.corpus_reader import read_passages
  passages = list(read_passages(os.path.join(SHARED_DATA, rel)))
  assert len(passages) == readme_counts()[rel]
  assert all(p.text for p in passages)
  assert sum(bool(p.title) for p in passages) > 0.99 * len(passages)


def test_verl_and_musique_answers_and_decompositions():
  """Spot checks against values visible in the files: verl answer lists are taken whole,
  MuSiQue aliases follow the answer and gold titles come from document_id."""
  from ragjax.data.musique import read_musique
  from ragjax.data.verl import read_verl
  nq = list(read_verl(os.path.join(SHARED_DATA, "searchr1_verl_parquet/nq_test.parquet")))
  assert nq[0].golden_answers == ("14 December 1972 UTC", "December 1972")
  assert nq[0].question == "when was the last time anyone was on the moon"
  lag = list(read_musique(os.path.join(SHARED_DATA, "musique/lag_musique_ans_dev_2417.json")))
  assert lag[0].supporting_titles == ("Green (Steve Hillage album)", "Miquette Giraudy")
  hip = list(read_musique(os.path.join(SHARED_DATA, "musique/hipporag_musique_train_100.json")))
  assert hip[0].golden_answers == ("G. Stanley Hall", "Stanley Hall")
