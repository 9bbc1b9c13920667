"""ragjax.retrieval: corpus store, encoders, ScaNN / exact / BM25 backends, Search-R1 server.

One interface everywhere: `retriever.search(queries: list[str], k) -> list[list[Hit]]`.
    open_index(dir)            an in-process retriever for an index built by `ragjax.retrieval.build`
    SearchClient(url)          the same interface over HTTP (Search-R1 `/retrieve` protocol)
"""

from ragjax.retrieval.types import Hit, Retriever


def open_index(directory: str, **kw):
  """See `ragjax.retrieval.index.open_index` (imported lazily: backends are heavy)."""
  from ragjax.retrieval.index import open_index as _open
  return _open(directory, **kw)


def __getattr__(name):
  if name == "SearchClient":
    from ragjax.retrieval.client import SearchClient
    return SearchClient
  if name == "RetrievalError":
    from ragjax.retrieval.client import RetrievalError
    return RetrievalError
  raise AttributeError(name)


__all__ = ["Hit", "Retriever", "open_index", "SearchClient", "RetrievalError"]
