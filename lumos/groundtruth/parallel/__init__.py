"""The training step of each parallel mode: data (`dp`), pipeline (`pp`) and tensor (`tp`)."""
