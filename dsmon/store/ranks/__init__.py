"""Per-rank tables of `dsmon run`'s probe records, kept as they arrive."""
