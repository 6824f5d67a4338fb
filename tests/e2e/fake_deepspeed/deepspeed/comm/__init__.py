from .comm import all_reduce  # noqa: F401 - DeepSpeed re-exports its collectives here too
