"""What an index directory may hold before it is opened: no pickles unless the user says so.

Index directories get shared and downloaded.  Everything ragjax writes into one is data (JSON,
Arrow, zarr, ScaNN protobuf / npy), but ScaNN's `load_searcher` unpickles `scann_docids.pkl`
when that file exists, and unpickling runs arbitrary code.  So a directory holding any pickle
is refused by name, before anything in it is read, unless the caller opts in with
`allow_pickle=True` (`--allow-pickle` on the command lines).
"""

from __future__ import annotations

import os

PICKLE_SUFFIXES = (".pkl", ".pickle", ".pck", ".pcl")


class UntrustedIndexError(ValueError):
  """An index directory holds a file that could run code when loaded."""


def pickles_in(directory: str) -> list[str]:
  """Paths of pickle-named files anywhere below `directory`, sorted."""
  found = []
  for root, _, files in os.walk(directory):
    found += [os.path.join(root, f) for f in files if f.lower().endswith(PICKLE_SUFFIXES)]
  return sorted(found)


def refuse_pickles(directory: str, allow_pickle: bool = False) -> None:
  """Raises `UntrustedIndexError` naming the first pickle below `directory`, unless allowed."""
  if allow_pickle:
    return
  found = pickles_in(directory)
  if found:
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    raise UntrustedIndexError(
        f"{found[0]}{more}: refusing to open an index directory that holds a pickle (loading it "
        f"can run arbitrary code); delete it, or pass allow_pickle=True / --allow-pickle if you "
        f"trust where the index came from")
