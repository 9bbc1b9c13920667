"""ragjax.sampling: KV-cache sampler (jit prefill, while_loop decode, stops, extend)."""

from ragjax.sampling.sampler_config import (BUDGET, CACHE_FULL, EOS, NOT_RUN, PAUSED, STOP,
                                    STOP_REASONS, SamplerConfig)
from ragjax.sampling.sampler import Sampler
from ragjax.sampling.state import SamplerState, TurnOutput
from ragjax.sampling.stops import StopTable, compile_stop_strings, token_bytes

__all__ = ["Sampler", "SamplerConfig", "SamplerState", "TurnOutput", "StopTable",
           "compile_stop_strings", "token_bytes", "NOT_RUN", "STOP", "EOS", "BUDGET",
           "CACHE_FULL", "PAUSED", "STOP_REASONS"]
