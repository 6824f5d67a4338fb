"""Per-step tables of the engine timers, kept as timer records arrive (``Store.timers``)."""
