"""Eager (pure PyTorch) twins of every kernel op; they run on any device."""
