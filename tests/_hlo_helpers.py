"""Reading XLA's compiled HLO text (`Program.of(jax.jit(f).lower(...))`) in tests.

Only what the tests ask of a program: its computations, the instructions of one, the bodies
of its while loops, which entry parameters the outputs alias (buffer donation) and the
instructions that produce an array of a given shape."""

from __future__ import annotations

import re

from _xla_helpers import USER_FUSIONS

_COMPUTATION = re.compile(r"^(ENTRY )?%(\S+) \(.*\{$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%(\S+) = (.+?) ([a-z][\w-]*)\((.*)$")
_PARAMETER = re.compile(r"^\s*%(\S+) = \S+ parameter\((\d+)\)(.*)$")


class Program:
  """One compiled module's text, split into computations."""

  @classmethod
  def of(cls, lowered) -> "Program":
    """`lowered` compiled as users' runs compile it (the suite's XLA flags choose another
    fusion emitter, for compile time: tests/_xla_helpers.py)."""
    return cls(lowered.compile(compiler_options=USER_FUSIONS).as_text())

  def __init__(self, text: str):
    self.text = text
    self.computations: dict[str, list[str]] = {}
    self.entry = None
    name = None
    for line in text.splitlines():
      m = _COMPUTATION.match(line)
      if m:
        name = m.group(2)
        self.computations[name] = []
        if m.group(1):
          self.entry = name
      elif line.startswith("}"):
        name = None
      elif name is not None:
        self.computations[name].append(line)

  def instructions(self, computation: str) -> list[tuple[str, str, str, str]]:
    """(name, result type, opcode, the whole line) of each instruction."""
    out = []
    for line in self.computations[computation]:
      m = _INSTRUCTION.match(line)
      if m:
        out.append((m.group(1), m.group(2), m.group(3), line.strip()))
    return out

  def while_bodies(self) -> list[str]:
    """The body computation of every while loop in the module (nested loops too)."""
    bodies = []
    for lines in self.computations.values():
      for line in lines:
        m = re.search(r" while\(.*body=%([\w.\-]+)", line)
        if m:
          bodies.append(m.group(1))
    return bodies

  def count(self, computation: str, opcode: str) -> int:
    return sum(op == opcode for _, _, op, _ in self.instructions(computation))

  def entry_parameters(self) -> dict[str, int]:
    """Entry parameter name (as JAX names it, e.g. `state_cache__k___0_.1`) -> its number;
    the metadata's `op_name` (e.g. `state.cache['k'][0]`) is a key too."""
    out = {}
    for line in self.computations[self.entry]:
      m = _PARAMETER.match(line)
      if m:
        out[m.group(1)] = int(m.group(2))
        meta = re.search(r'op_name="([^"]*)"', m.group(3))
        if meta:
          out[meta.group(1).replace("\\'", "'")] = int(m.group(2))
    return out

  def aliased_parameters(self) -> set[int]:
    """Entry parameters an output may share its buffer with (donated inputs)."""
    head = self.text.split("\n", 1)[0]
    start = head.find("input_output_alias={")
    if start < 0:
      return set()
    depth, i = 0, start + len("input_output_alias=")
    for j in range(i, len(head)):
      depth += {"{": 1, "}": -1}.get(head[j], 0)
      if depth == 0:
        break
    return {int(p) for p in re.findall(r"\}: \((\d+), \{", head[i:j + 1])}

  def producers(self, computation: str, shape: str) -> list[tuple[str, str]]:
    """(opcode, line) of the instructions in `computation` whose result holds an array of
    `shape` (e.g. `f32[8,2,64,16]`), leaving out parameters and tuple plumbing."""
    skip = ("parameter", "get-tuple-element", "tuple", "bitcast")
    return [(op, line) for _, ty, op, line in self.instructions(computation)
            if op not in skip and re.search(re.escape(shape) + r"\{", ty)]

  def calls(self, line: str) -> str:
    """The computation a fusion instruction calls."""
    return re.search(r"calls=%([\w.\-]+)", line).group(1)


def array_type(x) -> str:
  """An array's HLO type, e.g. `f32[8,2,64,16]`."""
  names = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "int32": "s32"}
  return f"{names[str(x.dtype)]}[{','.join(str(d) for d in x.shape)}]"
