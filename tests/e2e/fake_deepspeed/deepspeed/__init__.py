"""A stand-in for DeepSpeed with the engine methods the probe wraps (tests without torch)."""
