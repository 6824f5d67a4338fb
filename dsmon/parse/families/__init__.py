"""One module per family of output DeepSpeed (and the frameworks around it) prints.

Each module holds a sub-parser that :class:`dsmon.parse.log.LogParser` offers logical lines to
(timers, progress and throughput lines, the flops profiler's block, the comms logger, loss-scale
messages, the config dump, ``see_memory_usage`` blocks, run events and tracebacks, Megatron's
iteration lines, the Hugging Face Trainer's dicts, the autotuner's tables): a new output kind is
a new module here and one entry in :func:`dsmon.parse.log.default_parsers`.
"""
