"""TFDS builders: a question set exported as a TFDS dataset (array_record, one schema), read
back with `load_split` over `tfds.data_source` (random access, no TensorFlow; tfds 4.9.10
serialises through its own numpy path when TF is absent, which we checked by building and
reading here without TF).

An export, not the recipes' path: recipes read question files with
`ragjax.data.readers.read_examples` (the reader) and the synthetic world from
`world.generate_world`.  Each builder's READER is the same per-format function `read_examples`
dispatches to, so an exported split holds the same rows (tests/test_data_importers.py).

A file-backed builder is a `QAFilesBuilder` subclass with a `READER(path, data_source)`; its
`FilesConfig` points at the user's files per split, e.g.

    b = RagjaxFlashrag(config=FilesConfig(name="nq", files={"test": ["/data/nq/test.jsonl"]}),
                       data_dir="/tmp/tfds")
    b.download_and_prepare()
    rows = load_split(b, "test")

Records keep file order (`disable_shuffling`), and `metadata` is stored as a JSON string.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from typing import Callable, Iterable, Iterator, Mapping, Optional

import tensorflow_datasets as tfds
from etils import epath

from ragjax.data import choice, flashrag, hotpotqa, mathsets, musique, twowiki, verl
from ragjax.data.schema import DataError, Example
from ragjax.data.world import SPLITS, WorldConfig, generate_world

VERSION = tfds.core.Version("1.0.0")


def example_features() -> tfds.features.FeaturesDict:
  text, texts = tfds.features.Text, lambda: tfds.features.Sequence(tfds.features.Text())
  return tfds.features.FeaturesDict({
      "id": text(), "question": text(), "golden_answers": texts(), "options": texts(),
      "supporting_ids": texts(), "supporting_titles": texts(), "data_source": text(),
      "metadata": text()})


def encode(ex: Example) -> dict:
  """Example -> the feature dict TFDS serialises."""
  return {"id": ex.id, "question": ex.question, "golden_answers": list(ex.golden_answers),
          "options": list(ex.options), "supporting_ids": list(ex.supporting_ids),
          "supporting_titles": list(ex.supporting_titles), "data_source": ex.data_source,
          "metadata": json.dumps(dict(ex.metadata), ensure_ascii=False, sort_keys=True)}


def _info(builder, description: str) -> tfds.core.DatasetInfo:
  return tfds.core.DatasetInfo(builder=builder, description=description,
                               features=example_features(), disable_shuffling=True)


class _NoTensorFlowMixin:
  """Makes tfds 4.9.10 builders work without TensorFlow.

  tfds 4.9.10 locates a builder's source through `importlib_resources`, which it only
  declares as a dependency on Python < 3.9; on 3.11 without that package every builder
  defined in a package fails in `download_and_prepare`.  We return the path tfds itself falls
  back to (the class's source file), so no extra package is needed."""

  @tfds.core.utils.classproperty
  @classmethod
  def code_path(cls) -> epath.Path:
    return epath.Path(inspect.getfile(cls))

  def __init__(self, *, file_format: str = "array_record", **kwargs):
    # tfds defaults to tfrecord, whose writer needs TensorFlow; array_record does not.
    super().__init__(file_format=file_format, **kwargs)


def _keyed(located: Iterable[tuple[str, Example]]) -> Iterator[tuple[str, dict]]:
  """Yields (id, features); a repeated id within a split is an error naming both places."""
  seen: dict[str, str] = {}
  for where, ex in located:
    if ex.id in seen:
      raise DataError(where, "id", f"duplicate id {ex.id!r} in one split (first at {seen[ex.id]})")
    seen[ex.id] = where
    yield ex.id, encode(ex)


@dataclasses.dataclass
class FilesConfig(tfds.core.BuilderConfig):
  """Points a file-backed builder at files: `files` maps split name -> list of paths."""
  files: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
  data_source: str = ""  # overrides the per-record / file-name default when set


class QAFilesBuilder(_NoTensorFlowMixin, tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """Base of every file-backed builder; subclasses only set READER (and a docstring)."""
  VERSION = VERSION
  READER: Callable[[str, Optional[str]], Iterable[Example]]
  BUILDER_CONFIG_CLASS = FilesConfig

  def _info(self) -> tfds.core.DatasetInfo:
    return _info(self, (type(self).__doc__ or "").strip())

  def _split_generators(self, dl_manager):
    files = dict(self.builder_config.files)
    if not files:
      raise ValueError(f"{self.name}: FilesConfig(name={self.builder_config.name!r}) names no files")
    return {split: self._generate_examples(tuple(paths)) for split, paths in files.items()}

  def _generate_examples(self, paths: tuple[str, ...]):
    reader = type(self).READER
    source = self.builder_config.data_source or None

    def located():
      for path in paths:
        for i, ex in enumerate(reader(path, source)):
          yield f"{path} example {i}", ex
    return _keyed(located())


class RagjaxFlashrag(QAFilesBuilder):
  """FlashRAG jsonl questions ({id, question, golden_answers, metadata})."""
  READER = staticmethod(flashrag.read_flashrag)


class RagjaxVerl(QAFilesBuilder):
  """verl / Search-R1 parquet (prompt, reward_model.ground_truth, extra_info)."""
  READER = staticmethod(verl.read_verl)


class RagjaxHotpotqa(QAFilesBuilder):
  """HotpotQA with contexts (official, Hugging Face or IRCoT layout)."""
  READER = staticmethod(lambda path, source: hotpotqa.read_hotpotqa(path, source or "hotpotqa"))


class RagjaxTwowiki(QAFilesBuilder):
  """2WikiMultihopQA with contexts (official layout)."""
  READER = staticmethod(lambda path, source: twowiki.read_twowiki(path, source or "2wikimultihopqa"))


class RagjaxMusique(QAFilesBuilder):
  """MuSiQue with paragraphs, or Q/A with decompositions."""
  READER = staticmethod(lambda path, source: musique.read_musique(path, source or "musique"))


class RagjaxMultipleChoice(QAFilesBuilder):
  """UR² multiple choice (MMLU-Pro, MedQA): options and answer letter."""
  READER = staticmethod(choice.read_multiple_choice)


class RagjaxMath(QAFilesBuilder):
  """UR² math (MATH-500, Minerva, GSM8K): final answer."""
  READER = staticmethod(mathsets.read_math)


@dataclasses.dataclass
class WorldBuilderConfig(tfds.core.BuilderConfig):
  world: WorldConfig = WorldConfig()


class RagjaxWorld(_NoTensorFlowMixin, tfds.core.GeneratorBasedBuilder):
  """The synthetic search world's questions: train/dev from world 0, test from world 1."""
  VERSION = VERSION
  BUILDER_CONFIG_CLASS = WorldBuilderConfig
  BUILDER_CONFIGS = [
      WorldBuilderConfig(name="default", description="WorldConfig() defaults"),
      WorldBuilderConfig(name="small", description="a quick world for tests and smoke runs",
                         world=WorldConfig(num_people=30, num_places=10, num_orgs=8, num_works=15,
                                           retry_groups=6, num_train=120, num_dev=20,
                                           num_test=40)),
  ]

  def _info(self) -> tfds.core.DatasetInfo:
    return _info(self, (type(self).__doc__ or "").strip())

  def world(self):
    """The generated world (passages for the retriever live here, not in the TFDS files)."""
    return generate_world(self.builder_config.world)

  def _split_generators(self, dl_manager):
    world = self.world()
    return {split: self._generate_examples(world.questions[split]) for split in SPLITS}

  def _generate_examples(self, examples):
    return _keyed((f"world question {ex.id}", ex) for ex in examples)


BUILDERS: dict[str, type] = {cls.name: cls for cls in (
    RagjaxWorld, RagjaxFlashrag, RagjaxVerl, RagjaxHotpotqa, RagjaxTwowiki, RagjaxMusique,
    RagjaxMultipleChoice, RagjaxMath)}
