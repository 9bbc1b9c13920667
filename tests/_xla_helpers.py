"""XLA flags for the test run and every process a test starts.

`--xla_backend_optimization_level=0`: XLA's CPU backend skips LLVM's optimisation passes, so a
program compiles in about half the CPU time (the suite compiles hundreds of tiny programs and
runs each briefly; tests/test_rl_train_step.py: 110 -> 66 CPU seconds).  The programs are the
same HLO, optimised by XLA as before; only the machine code is less tuned.  Tests check
results, never speed against a threshold set for optimised code.

`--xla_cpu_use_fusion_emitters=false`: fusions are emitted by XLA's classic elemental emitter
instead of the MLIR fusion emitters, and `--xla_cpu_parallel_codegen_split_count=1` compiles
each program as one LLVM module (the split pays off on many cores, not on CI's two):
`python -m ragjax.train --config=configs/world.py:toy` (217 programs) compiled in 30.7 s and
ran in 67 s with the first flag alone, in 11.1 s and 40 s with all three (2026-12-07, this
2-core machine, `JAX_LOG_COMPILES=1`).  Users' runs keep XLA's defaults."""

FAST_COMPILE = ("--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false "
                "--xla_cpu_parallel_codegen_split_count=1")


def xla_flags(devices=None) -> str:
  """XLA_FLAGS for a test process: `devices` fake CPU devices (None: XLA's default, one)."""
  count = f"--xla_force_host_platform_device_count={devices} " if devices else ""
  return count + FAST_COMPILE


# The compiler options a test that reads compiled HLO (tests/_hlo_helpers.py) passes to
# `lowered.compile(...)`: the fusion emitters users' runs compile with (the classic emitter
# outlines and fuses differently); the optimisation level and codegen split change machine
# code only.
USER_FUSIONS = {"xla_cpu_use_fusion_emitters": True}
