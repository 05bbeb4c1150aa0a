"""Operator duration models: predict a kernel's (or collective's) time from its shape.

Modules, one job each:

- `features`  shape → FLOPs, bytes moved and derived shape features, per operator class
- `roofline`  the device table (peak FLOP rate, bandwidth, SM count) and the roofline prior
- `opbench`   reading micro-benchmark CSVs in the `../shared/opbench` format
- `fit`       fitting one model per (device, operator, direction[, layout]): physics first,
              then a log-space correction, then boosted trees on the residual
- `predict`   evaluating fitted models (pure numpy, no scikit-learn import) with an interval and
              an out-of-range flag
- `store`     keeping benchmark rows in the warehouse; `devices`: whose, matched to a trace's GPU

Importing this package imports numpy only; scikit-learn is imported when a model is fitted,
pyarrow when the warehouse is read or written.
"""

from __future__ import annotations
