"""The five Flax NNX sequence mixers, twins of :mod:`mingru.mixers` (same module names:
``log``, ``signed``, ``rotation``, ``givens``, ``delta``), each with a ``flax.nnx.RNN`` cell."""
