"""GPU samples on a node: which GPUs to sample, and the NVML poller with its table of fields."""
