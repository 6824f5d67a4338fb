"""The records table: every record but a GPU sample, as its JSON line with indexed columns."""
