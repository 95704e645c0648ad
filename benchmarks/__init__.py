"""mingru_benchmarks — the benchmark harness behind ``mingru bench`` and the results page.

:mod:`~mingru_benchmarks.registry` (the cases), :mod:`~mingru_benchmarks.run` (the one runner),
:mod:`~mingru_benchmarks.timers` (one timer per framework, paired A/B rounds),
:mod:`~mingru_benchmarks.tables` and :mod:`~mingru_benchmarks.page` (the markdown, the page's
generated blocks); the frameworks' sides :mod:`~mingru_benchmarks.torch_side`,
:mod:`~mingru_benchmarks.jax_side` and the peers :mod:`~mingru_benchmarks.peers` are imported
only when a suite runs. :mod:`~mingru_benchmarks.paper` (with
:mod:`~mingru_benchmarks.paper_lm` and :mod:`~mingru_benchmarks.paper_copy`) trains the paper's
peers with ``mingru train``'s data, loop and presets. Nothing of the library imports this
package.
"""
