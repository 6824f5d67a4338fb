"""The node side of dsmon: what runs on a training node, and nothing of the dashboard.

``tail/`` follows DeepSpeed's logs, the flops profiler's file and the probe's files and parses
them (through ``dsmon.parse``); ``gpu/`` samples the GPUs through NVML; ``send/`` delivers the
records to an ingest server, spooling them while it is away; :mod:`collectors.agent` runs the
three together; :mod:`collectors.job` starts a training job with the per-rank probe
(``probe/``, standard library only: it runs inside the user's ranks). It imports ``dsmon`` (the
record model and the parsers) and never the command line, Streamlit, pandas or the server
stack, so a node installed with ``pip install 'dsmon[collector]'`` runs it.
"""
