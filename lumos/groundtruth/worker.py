"""One rank's process: `python -m lumos.groundtruth.worker SPEC.json RANK`.

Sets the thread counts before torch starts its pools, joins the gloo group on loopback (so the
traces carry `distributedInfo` even for one rank), builds the trainer of the configuration's
parallel mode, runs `profile.run_rank` and writes its result as JSON for the runner.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from pathlib import Path


def main(spec_path: str, rank_text: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    rank = int(rank_text)
    threads = str(spec["control"]["threads"])
    # Must be set before torch is imported: OpenMP sizes its pool at start-up.
    os.environ["OMP_NUM_THREADS"] = threads
    os.environ["MKL_NUM_THREADS"] = threads

    import torch
    import torch.distributed as dist

    from lumos.groundtruth.config import RunConfig, RunControl, host_cores
    from lumos.groundtruth.profile import run_rank

    torch.set_num_threads(int(threads))
    torch.set_num_interop_threads(1)
    cfg = RunConfig(**spec["config"]).validate()
    control = RunControl(**spec["control"]).validate()
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{spec['port']}",
        rank=rank,
        world_size=cfg.world_size,
    )
    try:
        if cfg.pp > 1:
            from lumos.groundtruth.parallel.pp import PipelineTrainer as Trainer
        else:
            from lumos.groundtruth.parallel.dp import DataParallelTrainer as Trainer
        trainer = Trainer(cfg, rank, cfg.world_size)
        # Move the start-up objects (torch's modules, the model) out of the collector's reach, as
        # large trainers do: a full collection over them costs milliseconds at random points of
        # a step (one landed between a ProfilerStep's start and the step timer here).
        gc.collect()
        gc.freeze()
        pattern = spec["trace_pattern"]
        run = run_rank(
            trainer.step,
            control,
            lambda cycle: Path(pattern.format(rank=rank, cycle=cycle)),
            lambda cycle: {
                "job_name": spec["job_name"].format(cycle=cycle),
                "lumos_groundtruth": {
                    "config": cfg.to_dict(),
                    "cycle": cycle,
                    "host_cores": host_cores(),
                },
            },
        )
        dist.barrier()  # no rank leaves while a peer still needs its sends
    finally:
        dist.destroy_process_group()
    result = {
        "rank": rank,
        "steps": [s.to_dict() for s in run.steps],
        "traces": run.traces,
        "torch": torch.__version__,
    }
    Path(spec["result_pattern"].format(rank=rank)).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
