"""Estimation: the base configuration of a job inferred from its trace, configuration overrides,
memory per rank, and the step of another configuration: a single-GPU base's step graph edited
and replayed (`gpu_step`, `gpu_edit`, `kernel_work`, `gpu_estimate`), other bases through the
CPU-operator template and its transforms (`layers`, `transforms`, `estimator`)."""

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
