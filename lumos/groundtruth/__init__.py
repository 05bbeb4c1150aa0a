"""Ground truth: real profiled GPT training runs on the CPU.

`config` describes a run and parses grid files, `model` is the GPT decoder, `parallel/` builds the
training step of each parallel mode, `profile` drives the profiler and the step timers, `worker` is
the per-rank process and `runner` spawns the ranks and writes `measured.json`. Everything but
`config` needs torch (the `train` extra); import those modules only when torch is wanted.
"""
