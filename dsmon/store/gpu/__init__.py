"""GPU samples: typed rows per GPU series, roll-ups, blocks by time, and the questions pages ask."""
