"""Per-query routing to one of several retrievers by a per-query key (UR²: the example's task).

    r = RoutedRetriever({"qa": abstracts_index, "default": full_index})
    r.search_with_context(["who built it", "definition of a ring"], 10, tasks=["qa", "math"])

UR² searches Wikipedia abstracts for open-domain QA and the full KILT passages for math and
multiple choice (seeds_ur2_rezero.md §A5: `source == "rag"` -> abstracts); the rollout engine
hands each query its task through `search_with_context` (the protocol's `retrieval_context`).
A key with no route of its own, and plain `search`, go to the "default" route.  The other
per-query context lists pass through to routes that take them (a summarising server) and are
dropped for plain indexes.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from ragjax.retrieval.types import Hit, check_search_args

DEFAULT = "default"


class RoutedRetriever:
  """See the module docstring; `key` names the per-query list that picks the route."""

  def __init__(self, routes: Mapping[str, object], key: str = "tasks"):
    routes = dict(routes)
    if DEFAULT not in routes:
      raise ValueError(f"retrieval routes need a {DEFAULT!r} route; got {sorted(routes)}")
    for name, r in routes.items():
      if not hasattr(r, "search"):
        raise TypeError(f"route {name!r} is not a retriever (no search): {type(r).__name__}")
    self.routes, self.key = routes, key

  def route(self, value) -> str:
    return value if value in self.routes else DEFAULT

  def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
    return self.routes[DEFAULT].search(queries, k)

  def search_with_context(self, queries: Sequence[str], k: int, **contexts) -> list[list[Hit]]:
    queries = check_search_args(queries, k)
    n = len(queries)
    for name, values in contexts.items():
      if values is not None and len(values) != n:
        raise ValueError(f"{n} queries but {len(values)} {name!r} values")
    keys = contexts.get(self.key) or [DEFAULT] * n
    groups: dict[str, list[int]] = {}
    for i, value in enumerate(keys):
      groups.setdefault(self.route(value), []).append(i)
    out: list = [None] * n
    for name, idx in groups.items():
      target = self.routes[name]
      sub = [queries[i] for i in idx]
      if hasattr(target, "search_with_context"):
        ctx = {key: [v[i] for i in idx] for key, v in contexts.items() if v is not None}
        hits = target.search_with_context(sub, k, **ctx)
      else:
        hits = target.search(sub, k)
      if len(hits) != len(idx):
        raise ValueError(f"route {name!r} returned {len(hits)} result lists for {len(idx)} queries")
      for i, h in zip(idx, hits):
        out[i] = h
    return out

  def health(self) -> dict:
    return {name: (r.health() if hasattr(r, "health") else "in process")
            for name, r in self.routes.items()}
