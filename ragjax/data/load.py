"""`load_split`: reads back a question set a TFDS builder (`ragjax.data.builders`) exported.

Returns a random-access sequence of plain dicts in the `Example` field order (strings decoded,
`metadata` parsed from JSON), backed by `tfds.data_source` over array_record files.  The
recipes do not call it: they read question files with `ragjax.data.readers.read_examples`, the
reader (docs/components.md, "Data: one reader"); this is for pipelines that want the TFDS copy.
"""

from __future__ import annotations

import json
import os
from typing import Optional, Sequence, Union

import tensorflow_datasets as tfds

from ragjax.data.schema import FIELDS


def _decode(value):
  if isinstance(value, bytes):
    return value.decode("utf-8")
  if isinstance(value, (list, tuple)) or hasattr(value, "tolist"):
    return [_decode(v) for v in (value.tolist() if hasattr(value, "tolist") else value)]
  return value


class ExampleSequence(Sequence[dict]):
  """Lazy view over an array_record data source; rows decode on access."""

  def __init__(self, source):
    self._source = source

  def __len__(self) -> int:
    return len(self._source)

  def __getitem__(self, index):
    if isinstance(index, slice):
      return [self[i] for i in range(*index.indices(len(self)))]
    if index < 0:
      index += len(self)
    if not 0 <= index < len(self):
      raise IndexError(index)
    raw = self._source[index]
    row = {k: _decode(raw[k]) for k in FIELDS if k in raw}
    row["metadata"] = json.loads(row["metadata"]) if row.get("metadata") else {}
    return row


def get_builder(name_or_builder: Union[str, tfds.core.DatasetBuilder],
                data_dir: Optional[str] = None) -> tfds.core.DatasetBuilder:
  """A builder instance, a prepared dataset directory, or a registered 'name[/config]'."""
  if isinstance(name_or_builder, tfds.core.DatasetBuilder):
    return name_or_builder
  if os.path.isfile(os.path.join(str(name_or_builder), "dataset_info.json")):
    return tfds.builder_from_directory(name_or_builder)
  import ragjax.data.builders  # noqa: F401  (registers the ragjax_* builders)
  return tfds.builder(name_or_builder, data_dir=data_dir)


def load_split(name_or_builder: Union[str, tfds.core.DatasetBuilder], split: str,
               data_dir: Optional[str] = None, prepare: bool = True) -> ExampleSequence:
  """Rows of one split; prepares the dataset first if needed (and `prepare` is set)."""
  builder = get_builder(name_or_builder, data_dir)
  if prepare and not builder.is_prepared():
    builder.download_and_prepare()
  splits = builder.info.splits
  if split not in splits:
    raise KeyError(f"{builder.name}: no split {split!r}; it has {sorted(splits)}")
  return ExampleSequence(builder.as_data_source(split=split))
