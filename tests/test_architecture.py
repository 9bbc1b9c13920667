"""The import rules of docs/architecture.md hold in the code.

The rules are the fenced `import-rules` block of docs/architecture.md (parsed here, so the doc and
the test cannot drift); the imports are read from every ragjax/**/*.py with `ast`, function-local
ones included.  A unit is a package under ragjax/ (`rl`, `rollout`, ...) or a top-level module
(`registry`, `train`, ...).  Checked: every import between units is one the table allows, the
units' graph has no cycle, and no module imports a `_private` name from another module.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "architecture.md")
PKG = os.path.join(ROOT, "ragjax")


def parse_rules(text: str) -> dict[str, set[str]]:
  """{unit: units it may import} from the doc's ```import-rules block (`unit: a b c`)."""
  m = re.search(r"```import-rules\n(.*?)```", text, re.S)
  if not m:
    raise ValueError("docs/architecture.md has no ```import-rules block")
  rules: dict[str, set[str]] = {}
  for line in m.group(1).splitlines():
    line = line.split("#", 1)[0].strip()
    if not line:
      continue
    unit, sep, rest = line.partition(":")
    if not sep or unit.strip() in rules:
      raise ValueError(f"import-rules: bad or repeated line {line!r}")
    rules[unit.strip()] = set(rest.split())
  return rules


@dataclasses.dataclass(frozen=True)
class Import:
  path: str           # file, relative to the repository
  line: int
  module: str         # the importing module, dotted
  target: str         # the imported module, dotted (ragjax.x.y)
  names: tuple        # names taken from it (`from target import names`)


def unit_of(module: str, units: set[str]) -> str:
  """The unit of a dotted ragjax module: its package under ragjax/, or its top-level module."""
  parts = module.split(".")
  return parts[1] if len(parts) > 1 and parts[1] in units else module


def module_name(path: str, root: str = ROOT) -> str:
  rel = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
  return rel[:-len(".__init__")] if rel.endswith(".__init__") else rel


def is_module(dotted: str, root: str = ROOT) -> bool:
  base = os.path.join(root, *dotted.split("."))
  return os.path.isdir(base) or os.path.exists(base + ".py")


def imports_of(source: str, module: str, path: str, root: str = ROOT) -> list[Import]:
  """Every import of a ragjax module in `source`, at any depth (function-local ones too).
  `from ragjax.pkg import mod` counts as an import of ragjax.pkg.mod when mod is a module."""
  out = []
  package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
  for node in ast.walk(ast.parse(source, path)):
    if isinstance(node, ast.Import):
      for a in node.names:
        if a.name.split(".")[0] == "ragjax":
          out.append(Import(path, node.lineno, module, a.name, ()))
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        up = package.split(".")[:len(package.split(".")) - node.level + 1]
        base = ".".join(up + ([base] if base else []))
      if base.split(".")[0] != "ragjax":
        continue
      plain = []
      for a in node.names:
        sub = f"{base}.{a.name}"
        if is_module(sub, root):
          out.append(Import(path, node.lineno, module, sub, ()))
        else:
          plain.append(a.name)
      if plain:
        out.append(Import(path, node.lineno, module, base, tuple(plain)))
  return out


def all_imports(root: str = ROOT) -> list[Import]:
  out = []
  for d, _, files in os.walk(os.path.join(root, "ragjax")):
    for f in sorted(files):
      if f.endswith(".py"):
        path = os.path.join(d, f)
        with open(path, encoding="utf-8") as fh:
          out += imports_of(fh.read(), module_name(path, root), os.path.relpath(path, root), root)
  return out


def units_in(pkg: str = PKG) -> set[str]:
  return {n[:-3] if n.endswith(".py") else n for n in os.listdir(pkg)
          if (n.endswith(".py") and n != "__init__.py")
          or os.path.exists(os.path.join(pkg, n, "__init__.py"))}


def rule_violations(imports, rules: dict[str, set[str]], units: set[str]) -> list[str]:
  """One line per import between units that the rules do not allow."""
  bad = []
  for imp in imports:
    src, dst = unit_of(imp.module, units), unit_of(imp.target, units)
    src, dst = src.removeprefix("ragjax."), dst.removeprefix("ragjax.")
    if src == dst or dst == "ragjax":
      continue
    if src not in rules:
      bad.append(f"{imp.path}:{imp.line}: unit {src!r} has no line in the import rules")
    elif dst not in rules[src]:
      bad.append(f"{imp.path}:{imp.line}: {imp.module} imports {imp.target}, but rule "
                 f"'{src}: {' '.join(sorted(rules[src]))}' does not allow {dst!r}")
  return bad


def private_violations(imports) -> list[str]:
  """One line per `from other.module import _name` (a private name of another module)."""
  return [f"{imp.path}:{imp.line}: {imp.module} imports the private name {n!r} of {imp.target}"
          for imp in imports for n in imp.names
          if n.startswith("_") and not n.startswith("__") and imp.target != imp.module]


def find_cycle(graph: dict[str, set[str]]):
  """A list of units forming a cycle, or None."""
  state: dict[str, int] = {}
  stack: list[str] = []

  def visit(u):
    state[u] = 1
    stack.append(u)
    for v in sorted(graph.get(u, ())):
      if state.get(v) == 1:
        return stack[stack.index(v):] + [v]
      if v not in state:
        found = visit(v)
        if found:
          return found
    stack.pop()
    state[u] = 2
    return None

  for u in sorted(graph):
    if u not in state:
      found = visit(u)
      if found:
        return found
  return None


@pytest.fixture(scope="module")
def rules():
  with open(DOC, encoding="utf-8") as f:
    return parse_rules(f.read())


@pytest.fixture(scope="module")
def imports():
  return all_imports()


def test_every_unit_has_a_rule(rules):
  units = units_in()
  assert not units - set(rules), f"units without a line in the import rules: {units - set(rules)}"
  assert not set(rules) - units, f"rules for units that do not exist: {set(rules) - units}"
  unknown = {d for allowed in rules.values() for d in allowed} - units
  assert not unknown, f"rules name units that do not exist: {unknown}"


def test_imports_follow_the_rules(rules, imports):
  bad = rule_violations(imports, rules, units_in())
  assert not bad, "imports that break docs/architecture.md:\n" + "\n".join(bad)


def test_the_rules_and_the_imports_have_no_cycle(rules, imports):
  assert find_cycle(rules) is None, f"the rules allow a cycle: {find_cycle(rules)}"
  units = units_in()
  graph: dict[str, set[str]] = {}
  for imp in imports:
    src, dst = unit_of(imp.module, units), unit_of(imp.target, units)
    if src != dst and dst != "ragjax":
      graph.setdefault(src, set()).add(dst)
  assert find_cycle(graph) is None, f"units import each other in a cycle: {find_cycle(graph)}"


def test_no_module_imports_a_private_name(imports):
  bad = private_violations(imports)
  assert not bad, "\n".join(bad)


def test_the_checker_catches_violations(tmp_path):
  """A synthetic package: a lower unit importing a higher one (function-locally), a private
  name, and a cycle are each reported, naming file, line and rule."""
  pkg = tmp_path / "ragjax"
  for d in ("low", "high"):
    (pkg / d).mkdir(parents=True)
    (pkg / d / "__init__.py").write_text("")
  (pkg / "__init__.py").write_text("")
  (pkg / "high" / "top.py").write_text("from ragjax.low.base import thing, _hidden\n")
  (pkg / "low" / "base.py").write_text(
      "thing = _hidden = 1\n\ndef f():\n  from ragjax.high import top\n  return top\n")
  rules = parse_rules("```import-rules\nlow:\nhigh: low  # above low\n```\n")
  imps = all_imports(str(tmp_path))
  units = units_in(str(pkg))
  bad = rule_violations(imps, rules, units)
  assert bad == ["ragjax/low/base.py:4: ragjax.low.base imports ragjax.high.top, but rule "
                 "'low: ' does not allow 'high'"]
  assert private_violations(imps) == [
      "ragjax/high/top.py:1: ragjax.high.top imports the private name '_hidden' of "
      "ragjax.low.base"]
  assert find_cycle({"low": {"high"}, "high": {"low"}}) == ["high", "low", "high"]
  assert find_cycle(rules) is None
