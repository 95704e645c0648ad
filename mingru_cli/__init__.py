"""mingru_cli — the ``mingru`` command line and the training demo.

Not library code: it uses the frontends (``mingru`` for PyTorch, ``mingru_jax`` for Flax) and
the kernels (``mingru_kernels``); none of them imports this package. Importing it, building
the parser, ``mingru --help`` and ``mingru info`` need neither torch nor jax;
``train``/``generate --framework jax`` and ``bench --suite jax`` need no torch, the rest of
``train``, ``generate`` and ``bench`` does.

Modules: :mod:`mingru_cli.cli` (the entry point, ``main``), :mod:`mingru_cli.config`
(``TrainConfig`` and the names of tasks and mixers, pure Python), :mod:`mingru_cli.tasks`
(NumPy), :mod:`mingru_cli.runner` (``run``, framework-free), :mod:`mingru_cli.train`
(PyTorch), :mod:`mingru_cli.train_jax` (Flax); private: ``_train_args`` (the ``train``
flags, presets and resume → ``TrainConfig``), ``_train_common`` (data stream, schedule,
scoring, the fit loop) and ``_checkpoint`` (the saved training state). ``mingru bench`` is a
front on the benchmark harness, :mod:`mingru_benchmarks` (imported only when it runs).
"""
