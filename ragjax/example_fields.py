"""Per-example fields of a dataset record: a leaf every package may read records with."""

from __future__ import annotations

from typing import Mapping


def record_field(record: Mapping, field: str, default=None):
  """A per-example field of a record (UR²'s task, retrieval flag, difficulty): the record's
  own key, else its `metadata` key (files keep such fields in metadata), else `default`."""
  if field in record:
    return record[field]
  meta = record.get("metadata") or {}
  return meta.get(field, default) if isinstance(meta, Mapping) else default
