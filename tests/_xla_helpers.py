"""XLA flags for the test run and every process a test starts.

`--xla_backend_optimization_level=0`: XLA's CPU backend skips LLVM's optimisation passes, so a
program compiles in about half the CPU time (the suite compiles hundreds of tiny programs and
runs each briefly; tests/test_rl_train_step.py: 110 -> 66 CPU seconds).  The programs are the
same HLO, optimised by XLA as before; only the machine code is less tuned.  Tests check
results, never speed against a threshold set for optimised code."""

FAST_COMPILE = "--xla_backend_optimization_level=0"


def xla_flags(devices=None) -> str:
  """XLA_FLAGS for a test process: `devices` fake CPU devices (None: XLA's default, one)."""
  count = f"--xla_force_host_platform_device_count={devices} " if devices else ""
  return count + FAST_COMPILE
