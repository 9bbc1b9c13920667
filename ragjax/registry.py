"""The one plug-in registry: every method part a config can name, by category.

A method is a config plus the plug-ins it registers; the trainer and the engine look plug-ins
up by the names the config gives and contain no method names themselves.  Every kind
registers the same way, with this decorator beside its code:

    @registry.register("reward", "em")
    def em_reward(ctx, **kwargs): ...

    @registry.register("protocol")      # a protocol class, under its own `name`
    @dataclasses.dataclass(frozen=True)
    class MyProtocol(SearchR1): name = "mine"; ...

    lookup("reward", "em")             # the function
    check("reward", c.rl.rewards, "rl.rewards")   # before any work: unknown names fail fast
    check_kwargs("reward", "em", c.rl.reward_kwargs.em, "rl.reward_kwargs.em")   # and misspelt
                                       # keyword arguments, against the plug-in's signature

Categories (the arguments in `KWARGS_AFTER` are the caller's; a config's kwargs are the rest):
  reward        fn(ctx: RewardContext, **kwargs) -> float | list[float]  (per step); a batched
                reward is fn(ctxs, **kwargs) -> values (`ragjax.rl.rewards.batched_reward`)
  advantage     an outcome estimator fn(rewards, group_ids, loss_mask, eps) -> [B, T], or one
                marked `uses_critic` (`ragjax.rl.advantages.critic_estimator`, GAE):
                fn(token_rewards, values, loss_mask, *, gamma, lam) -> ([B, T] advantages,
                [B, T] returns), which makes the run train a critic
  rollout_hook  factory(**kwargs) -> hook(views, editor) run after every parsed turn
  batch_filter  factory(tokenizer, **kwargs) -> fn(ctx: StepContext, state) -> rows to keep;
                runs after rewards and old log-probs, before advantages (REX-RAG's
                trajectory filter)
  behaviour     factory(tokenizer, **kwargs) -> fn(batch, old_logprobs, state) -> [B, T] log
                ratio denominators (in place of log pi_old; REX-RAG's mixture mu)
  metric        fn(rows, examples) -> {name: float} logged every step; a metric with a `ctx`
                parameter is called fn(rows, examples, ctx=StepContext) and also sees the
                step's arrays, behaviour log-probs and method state
  signature     fn(row, example) -> (num, den): the quantity a method's paper claim is about
                (ragjax.rl.signatures); `rl.signatures` logs it every step and
                `python -m ragjax.ablate` compares two arms on it
  data_stage    fn(records, *, seed, **kwargs) -> records: the training list the trainer's
                data cursor walks (UR²'s difficulty curriculum and task mixing); deterministic
                in (records, seed, kwargs), so the cursor position resumes it exactly

`state` is the trainer's method state: a JSON dict saved in every checkpoint, so what a
method carries from step to step (REX-RAG's keep-ratio history) resumes exactly.  `tokenizer`
is the policy's (the engine's).

  protocol      a `ragjax.rollout.protocols.Protocol` subclass (tag grammar, prompts, parser),
                built by `protocol.name` with the config's `protocol` fields (its dataclass
                fields are its keyword arguments; the class's defaults apply to the rest)

Built-ins register themselves where they are defined, and `ragjax.plugins` is the one module
that imports them all (the one list of built-in modules); the first lookup loads it (by name,
so this leaf module imports nothing from ragjax).  User components bind through gin in a
`--gin_file`:
`user_plugins.plugins = {"reward": {"mine": @my_reward}, "protocol": {"mine": @MyProtocol}}`.

    python -m ragjax.registry          # every kind, each name with its one-line description
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from typing import Any, Callable, Iterable, Mapping, Optional

import gin

CATEGORIES = ("reward", "advantage", "rollout_hook", "batch_filter", "behaviour",
              "metric", "signature", "data_stage", "protocol")
BUILTINS = "ragjax.plugins"       # the module that imports (so registers) every built-in
# The positional arguments the caller passes each kind (not a config's kwargs), and keyword
# arguments it passes itself.
KWARGS_AFTER = {"reward": 1, "rollout_hook": 0, "batch_filter": 1, "behaviour": 1,
                "data_stage": 1, "protocol": 0}
CALLER_KWARGS = {"data_stage": ("seed",)}

_TABLE: dict[str, dict[str, Any]] = {c: {} for c in CATEGORIES}


def _category(category: str) -> dict[str, Any]:
  if category not in _TABLE:
    raise KeyError(f"unknown plug-in category {category!r}; known: {list(CATEGORIES)}")
  return _TABLE[category]


def register(category: str, name: Optional[str] = None) -> Callable[[Any], Any]:
  """Decorator: adds a plug-in under (category, name); names are unique per category.  `name`
  omitted: the object's own `name` attribute (a protocol class's)."""
  table = _category(category)

  def wrap(obj):
    nonlocal name
    if name is None:
      name = getattr(obj, "name", None)
      if not isinstance(name, str):
        raise ValueError(f"register({category!r}) without a name needs an object with a "
                         f"`name` attribute, got {obj!r}")
    if name in table and table[name] is not obj:
      raise ValueError(f"{category} {name!r} is already registered (by "
                       f"{getattr(table[name], '__module__', '?')})")
    table[name] = obj
    return obj
  return wrap


@gin.configurable
def user_plugins(plugins: Optional[Mapping[str, Mapping[str, Any]]] = None
                 ) -> dict[str, dict[str, Any]]:
  """Plug-ins bound with gin ({category: {name: object}}); they may not shadow a built-in."""
  out = {}
  for category, table in dict(plugins or {}).items():
    _category(category)
    out[category] = dict(table)
  return out


def load_builtins() -> None:
  """Imports `BUILTINS` once (each built-in registers itself when its module is imported)."""
  if BUILTINS not in sys.modules:
    importlib.import_module(BUILTINS)


def _merged(category: str) -> dict[str, Any]:
  load_builtins()
  table = _category(category)
  extra = user_plugins().get(category, {})
  clash = sorted(set(extra) & set(table))
  if clash:
    raise ValueError(f"gin-bound {category} plug-ins {clash} clash with registered ones")
  return {**table, **extra}


def lookup(category: str, name: str) -> Any:
  table = _merged(category)
  if name not in table:
    raise KeyError(f"unknown {category} {name!r}; registered: {sorted(table)}")
  return table[name]


def names(category: str) -> list[str]:
  return sorted(_merged(category))


def check(category: str, keys: Iterable[str], field: str) -> None:
  """Raises ValueError naming the config `field` when any key is not registered."""
  known = _merged(category)
  bad = [k for k in keys if k not in known]
  if bad:
    raise ValueError(f"{field}: unknown {category} {bad}; registered: {sorted(known)}")


def keyword_names(category: str, obj: Any) -> Optional[list[str]]:
  """The keyword arguments a config may give plug-in `obj` of `category`, from its signature
  (None: any, it takes **kwargs)."""
  try:
    params = list(inspect.signature(obj).parameters.values())
  except (TypeError, ValueError):      # a builtin or C callable: nothing to check
    return None
  if any(p.kind is p.VAR_KEYWORD for p in params):
    return None
  params = params[KWARGS_AFTER.get(category, 0):]
  return [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
          and p.name not in CALLER_KWARGS.get(category, ())]


def check_kwargs(category: str, name: str, kwargs: Optional[Mapping[str, Any]],
                 field: str) -> None:
  """Raises ValueError naming the config `field` and the allowed names when `kwargs` has a key
  plug-in `name`'s signature does not take (checked before any work, not at the first call)."""
  allowed = keyword_names(category, lookup(category, name))
  bad = sorted(set(dict(kwargs or {})) - set(allowed)) if allowed is not None else []
  if bad:
    where = ", ".join(f"{field}.{k}" for k in bad)
    raise ValueError(f"{where}: not an argument of {category} {name!r}; it takes: "
                     f"{sorted(allowed)}")


def describe(obj: Any, width: int = 100) -> str:
  """A plug-in's one-line description: the first sentence of its docstring's first paragraph
  (a dataclass's generated signature does not count)."""
  doc = (getattr(obj, "__doc__", None) or "").strip()
  name = getattr(obj, "__name__", "")
  if not doc or (name and doc.startswith(name + "(")):
    return "(no description)"
  text = " ".join(doc.split("\n\n")[0].split())
  end = re.search(r"(?<!Eq)(?<!Dr)(?<!vs)(?<!e\.g)(?<!i\.e)\.\s+(?=[A-Z`(])", text)
  text = text if end is None else text[:end.start() + 1]
  return text if len(text) <= width else text[:width - 3] + "..."


def listing() -> str:
  """Every category's registered names, each with its one-line description."""
  out = []
  for category in CATEGORIES:
    out.append(f"{category}:")
    table = _merged(category)
    width = max((len(n) for n in table), default=0)
    out += [f"  {name:<{width}}  {describe(table[name])}" for name in sorted(table)]
  return "\n".join(out)


if __name__ == "__main__":
  # run as a script this file is `__main__`; the plug-ins register in `ragjax.registry`
  from ragjax import registry
  print(registry.listing())
