"""Estimation (issue 5): the base configuration of a job inferred from its trace, configuration
overrides, and memory per rank. Graph transforms and duration models build on these."""

from lumos.estimate.config import ConfigError, ModelConfig, parse_overrides
from lumos.estimate.infer import Inference, JobNotFound, infer_base
from lumos.estimate.memory import MemoryEstimate, estimate_memory

__all__ = [
    "ConfigError",
    "Inference",
    "JobNotFound",
    "MemoryEstimate",
    "ModelConfig",
    "estimate_memory",
    "infer_base",
    "parse_overrides",
]
