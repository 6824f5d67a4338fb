"""The dashboard's view of a run: frames cached per run, grown by what is new, and the health panel."""
