"""dsmon: a live monitor for DeepSpeed training runs (the core: records, parsers, store, analysis)."""

__version__ = "0.1.0"
