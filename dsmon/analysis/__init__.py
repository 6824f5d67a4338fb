"""Pure pandas analysis over the store's frames: step breakdowns, communication share, stats.

Functions take DataFrames (``Store.frames.frame``) and return DataFrames or numbers; nothing here
plots, reads files or touches the store, so the summary, the health checklist and the
dashboard pages all compute the same figures the same way.
"""
