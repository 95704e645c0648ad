"""A script preamble for subprocess tests of a Flax-only install."""

BLOCK_TORCH = """
    import importlib.abc, sys

    class _NoTorch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, _NoTorch())
"""
"""Makes ``import torch`` fail the way it does when torch is not installed (dedent it)."""
