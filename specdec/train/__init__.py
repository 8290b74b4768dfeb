"""Training data and drafts: the workloads, the distillation shards, the distillation run and the distilled
draft family."""
