"""A phase whose result is a directory, computed once and reused by a rerun of the same config:
the cold starts of the `qa`, `world`, `ur2` and `r3_rag` recipes.

    fingerprint = config_fields(c, sections=("seed", "model", "sft"), skip=("sft.log_every",))
    params = cached_phase(os.path.join(workdir, COLD_START_DIR), fingerprint,
                          compute=train_and_export,        # () -> (result, extra meta fields)
                          reuse=load_exported,             # (stored meta) -> result
                          scratch=(os.path.join(workdir, "sft"),))

The pattern: the config fields the phase depends on (`config_fields`: some sections or
prefixes, less the fields that cannot change its result) make its fingerprint; the phase's
directory holds a meta file (`COLD_START_META`) with the fingerprint it was computed under
and whatever the recipe wants back (a summary, trace counts).  A matching meta file means the
directory is reused (`reuse`, one log line); anything else runs `compute`, which writes the
directory, then the meta file is written (atomically, last: a killed phase is never taken for
a finished one) and the `scratch` directories (e.g. SFT checkpoints a killed phase resumed
from, superseded by the export) are removed.
"""

from __future__ import annotations

import os
import shutil
from typing import Any, Callable, Optional, Sequence

from ragjax.typed_config import flatten, json_safe, write_json_atomic
from ragjax.models.hf_io import check_decoder_dir
from ragjax.wiring.components import log, read_cache, set_aside

# Fields no phase's result depends on beyond rounding (how fast the sampler runs; added after
# phases were cached, so a stored fingerprint lacks them): never part of a fingerprint
SPEED_ONLY = ("sampler.shared_prefix",)
COLD_START_DIR = "cold_start_policy"       # under the workdir, beside policy/
COLD_START_META = "ragjax_cold_start.json"


def config_fields(c, *, sections: Sequence[str] = (), prefixes: Sequence[str] = (),
                  skip: Sequence[str] = (), everything: bool = False) -> dict:
  """The flattened config fields in `sections` (the first dotted part equal to one) or under
  `prefixes` (the key starts with one), or all of them with `everything`; less those starting
  with a `skip` prefix and the `SPEED_ONLY` ones."""
  sections, prefixes, skip = tuple(sections), tuple(prefixes), tuple(skip) + SPEED_ONLY
  return {k: v for k, v in flatten(c).items()
          if (everything or k.split(".")[0] in sections or (prefixes and k.startswith(prefixes)))
          and not k.startswith(skip)}


def stored_meta(directory: str, fingerprint: dict, meta: str = COLD_START_META,
                valid: Callable[[dict], bool] = lambda m: True,
                intact: Optional[Callable[[str], None]] = None) -> Optional[dict]:
  """The meta file of `directory` when it was computed under `fingerprint` (and holds what
  `valid` asks for) and `intact(directory)` raises nothing, else None.  A meta file that
  cannot be read or is not such a record, or a directory that is not intact (e.g. a policy
  whose weights were cut), is set aside as `.damaged` with one line
  (`ragjax.wiring.components.set_aside`): the phase is recomputed."""
  path = os.path.join(directory, meta)
  stored = read_cache(path, lambda m: "fingerprint" in m)
  if stored is None or stored["fingerprint"] != json_safe(fingerprint):
    return None
  if not valid(stored):
    set_aside(path, "the record lacks the fields this phase stores")
    return None
  if intact is not None:
    try:
      intact(directory)
    except (OSError, ValueError) as e:
      set_aside(directory, str(e))
      return None
  return stored


def cached_phase(directory: str, fingerprint: dict, *, compute: Callable[[], tuple[Any, dict]],
                 reuse: Callable[[dict], Any], scratch: Sequence[str] = (),
                 name: str = "cold start", reason: str = "same cold-start config",
                 meta: str = COLD_START_META,
                 valid: Callable[[dict], bool] = lambda m: True,
                 intact: Optional[Callable[[str], None]] = check_decoder_dir) -> Any:
  """`reuse(stored meta)` when `directory` was computed under `fingerprint` (`stored_meta`;
  `intact`: the check that the directory reads back, a policy's by default); else
  `compute()` -> (result, extra meta fields), then the meta file and the scratch removed."""
  stored = stored_meta(directory, fingerprint, meta, valid, intact)
  if stored is not None:
    log(f"{name}: reusing {directory} ({reason})")
    return reuse(stored)
  result, extra = compute()
  write_json_atomic(os.path.join(directory, meta),
                    {"fingerprint": json_safe(fingerprint), **(extra or {})})
  for path in scratch:
    shutil.rmtree(path, ignore_errors=True)
  return result
