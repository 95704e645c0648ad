"""Packed sequences (``cu_seqlens=``) in mingru_jax: a packed call equals running every
sequence alone — outputs, per-sequence final states, gradients of the inputs, states and
parameters — for ``linear_recurrence``, both cells (coupled too), the four scans, the four
state-output mixers (decay on and off), a block and a heterogeneous stack; chaining through
the per-sequence final states; ``jax.jit`` with a traced ``cu_seqlens`` and ``jax.grad``; the
kernel path (Triton's interpreter on CPU) with the walk and the look-back plans; bad offsets.

"Each sequence alone" is one UNPACKED call on a batch holding one sequence per row (batch rows
never interact), padded at the end by repeating its last step (a recurrence is causal, so the
padding changes none of the sequence's own steps); its final state is the row's state at the
sequence's last step. The offsets hold an empty sequence and a length-1 one. The eager path is
checked in float64; the kernel path (float32 only) against the packed eager path. Tiny shapes,
every computation jitted once: on CPU the cost is XLA compile time, so the file stays fast.
The float64 eager checks run on XLA's CPU device on a GPU machine too (``on_host``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import mingru_jax
from mingru_kernels.launch import switches
from tests.helpers import rel_err

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CU = (0, 3, 3, 4, 11)  # sequence 1 is empty, sequence 2 has one step
CU_EQ = (0, 3, 3, 6, 9)  # equal non-empty lengths: block and stack states come out per row
T, N = CU[-1], len(CU) - 1
PLANS = {"walk": dict(strategy="walk", block_t=4, block_d=4),
         "lookback": dict(strategy="lookback", block_t=4, block_d=16)}
CELLS = {"log": (False, False), "signed": (True, False), "coupled": (True, True)}


class Layout:
    """The unpacked batch of the sequences of ``cu`` (non-empty ones, one per row)."""

    def __init__(self, cu):
        self.cu = np.asarray(cu)
        lens = np.diff(self.cu)
        self.full = [n for n in range(len(lens)) if lens[n]]
        self.lens = lens[self.full]
        width = int(self.lens.max())
        starts = self.cu[self.full]
        # Packed step of every batch slot (padding repeats the sequence's last step).
        self.slot = starts[:, None] + np.minimum(np.arange(width)[None], self.lens[:, None] - 1)
        seq = np.searchsorted(self.cu[1:], np.arange(self.cu[-1]), side="right")
        self.row = np.array([self.full.index(s) for s in seq])
        self.col = np.arange(self.cu[-1]) - self.cu[seq]
        # log_values layout of parallel_scan_log: slot n·1 + cu[n] is log h_0 of sequence n.
        first = starts + np.array(self.full)
        self.vslot = np.concatenate([first[:, None], first[:, None] + 1 + self.slot
                                     - starts[:, None]], axis=1)

    def batch(self, x):
        """``(1, T, ...)`` packed → ``(rows, width, ...)``."""
        return None if x is None else x[0][self.slot]

    def rows(self, state):
        """``(N, ...)`` per-sequence states → the rows' ``(rows, ...)``."""
        return None if state is None else state[np.array(self.full)]

    def unbatch(self, y):
        """``(rows, width, ...)`` → ``(1, T, ...)`` packed."""
        return y[self.row, self.col][None]

    def last(self, y):
        """Each row's value at its sequence's last step."""
        return y[np.arange(len(self.full)), self.lens - 1]

    def finals(self, last, empty):
        """``(N, ...)``: the rows' final states, ``empty(n)`` for an empty sequence."""
        where = {n: i for i, n in enumerate(self.full)}
        return jnp.stack([last[where[n]] if n in where else empty(n)
                          for n in range(len(self.cu) - 1)])


LAYOUT, LAYOUT_EQ = Layout(CU), Layout(CU_EQ)


def _cu(values=CU):
    return jnp.asarray(values, jnp.int32)


def _rand(seed, *shapes, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return [jnp.asarray(rng.standard_normal(s), dtype) for s in shapes]


def _close(got, want, tol, what=""):
    got, want = jax.tree.leaves(got), jax.tree.leaves(want)
    assert len(got) == len(want), what
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert rel_err(np.asarray(g), np.asarray(w), floor=1e-12) <= tol, f"{what} leaf {i}"


def _weights(seed, out_shape, final_shape, dtype=np.float64):
    w, wf = _rand(seed, out_shape, final_shape, dtype=dtype)
    return lambda out, final: (out * w).sum() + (final * wf).sum()


def _with_grads(fn, loss, argnums):
    """jit of ``args -> (fn(*args), loss, its gradients)`` (one forward)."""
    def value(*x):
        out = fn(*x)
        return loss(*out), out

    vg = jax.value_and_grad(value, argnums, has_aux=True)
    return jax.jit(lambda *x: (lambda r: (r[0][1], r[0][0], r[1]))(vg(*x)))


# ----------------------------------------------------------------------------- linear_recurrence


def _lr_packed(a, b, h0, cu):
    return mingru_jax.linear_recurrence(a, b, h0, True, cu_seqlens=cu)


def _lr_alone(a, b, h0):
    h = mingru_jax.linear_recurrence(LAYOUT.batch(a), LAYOUT.batch(b), LAYOUT.rows(h0))
    zero = jnp.zeros(a.shape[2:], a.dtype)
    return LAYOUT.unbatch(h), LAYOUT.finals(LAYOUT.last(h), lambda n: zero if h0 is None
                                            else h0[n])


@pytest.mark.usefixtures("on_host")
def test_linear_recurrence_equals_each_sequence_alone_jit_and_grad():
    D = 3
    with jax.enable_x64(True), mingru_jax.use_backend("eager"):
        a, b, h0 = _rand(0, (1, T, D), (1, T, D), (N, D))
        a = jnp.tanh(a)
        loss = _weights(1, (1, T, D), (N, D))
        # cu_seqlens traced (values unchecked under jit), with and without h_0.
        packed = _with_grads(lambda a, b, h0, cu: _lr_packed(a, b, h0, cu), loss, (0, 1, 2))
        got = packed(a, b, h0, _cu())
        _close(got, _with_grads(_lr_alone, loss, (0, 1, 2))(a, b, h0), 1e-12, "h, h_T, grads")
        assert got[0][1].shape == (N, D)
        np.testing.assert_array_equal(got[0][1][1], h0[1])  # the empty sequence keeps its state
        # Offsets concrete inside the trace (values checked), no h_0: empty ends at zero.
        _close(jax.jit(lambda a, b: _lr_packed(a, b, None, _cu()))(a, b),
               jax.jit(lambda a, b: _lr_alone(a, b, None))(a, b), 1e-12, "no h0")
        # Another packing through the same compiled function: one whole sequence, empties.
        (h, h_T), *_ = packed(a, b, h0, _cu((0, 0, 11, 11, 11)))
        _close(h, jax.jit(mingru_jax.linear_recurrence)(a, b, h0[1:2]), 1e-12, "other")
        _close(h_T[np.array([0, 2, 3])], h0[np.array([0, 2, 3])], 0.0)


def _chain_parts():
    """Every sequence of CU split in two: the first parts packed, then the rest packed."""
    cut = [1, 0, 1, 3]  # steps of each sequence in the first call
    spans = list(zip(CU[:-1], CU[1:], strict=True))
    first = [np.arange(lo, lo + c) for (lo, _), c in zip(spans, cut, strict=True)]
    rest = [np.arange(lo + c, hi) for (lo, hi), c in zip(spans, cut, strict=True)]

    def offsets(parts):
        return _cu(np.concatenate([[0], np.cumsum([len(p) for p in parts])]))

    return (np.concatenate(first), offsets(first)), (np.concatenate(rest), offsets(rest))


@pytest.mark.usefixtures("on_host")
def test_chaining_linear_recurrence_and_mixer():
    (i1, cu1), (i2, cu2) = _chain_parts()
    with jax.enable_x64(True), mingru_jax.use_backend("eager"):
        a, b, h0 = _rand(2, (1, T, 2), (1, T, 2), (N, 2))
        m = mingru_jax.SignedMinGRU(3, 4, learnable_h0=True, decay="learnable",
                                    param_dtype=jnp.float64, rngs=nnx.Rngs(0))
        graphdef, params = nnx.split(m)
        (x,), dt = _rand(3, (1, T, 3)), jnp.linspace(0.1, 2.0, T)[None]

        @jax.jit
        def run(a, b, h0, x, params):
            m = nnx.merge(graphdef, params)
            whole = _lr_packed(a, b, h0, _cu()), m(x, None, dt, True, cu_seqlens=_cu())
            h1, mid = _lr_packed(a[:, i1], b[:, i1], h0, cu1)
            h2, end = _lr_packed(a[:, i2], b[:, i2], mid, cu2)
            y1, s1 = m(x[:, i1], None, dt[:, i1], True, cu_seqlens=cu1)
            y2, s2 = m(x[:, i2], s1, dt[:, i2], True, cu_seqlens=cu2)
            return whole, ((h1, h2, end), (y1, y2, s2))

        ((h, h_T), (y, state)), ((h1, h2, end), (y1, y2, s2)) = run(a, b, h0, x, params)
        order = np.concatenate([i1, i2])
        _close(end, h_T, 1e-12, "final states")
        _close(jnp.concatenate([h1, h2], 1), h[:, order], 1e-12, "states")
        _close(s2, state, 1e-12, "mixer states")
        _close(jnp.concatenate([y1, y2], 1), y[:, order], 1e-12, "mixer")


# ----------------------------------------------------------------------------- cells


def _cell(cell, k, h0, lg, cu=None):
    signed, coupled = CELLS[cell]
    kw = {} if cu is None else {"cu_seqlens": cu}
    if signed:
        return mingru_jax.signed_mingru_cell(k, h0, lg, coupled, True, **kw)
    return mingru_jax.mingru_cell(k, h0, lg, True, **kw)


def _cell_inputs(cell, D, decay_channels, seed, dtype=np.float64):
    signed, _ = CELLS[cell]
    k, lg = _rand(seed, (1, T, (3 if signed else 2) * D), (1, T, decay_channels), dtype=dtype)
    h0 = jnp.asarray(np.random.default_rng(seed + 1).random((N, D)) + 0.1, dtype)
    return 2 * k, h0, -jnp.abs(lg)


@pytest.mark.usefixtures("on_host")
@pytest.mark.parametrize("cell", list(CELLS))
def test_cells_equal_each_sequence_alone(cell):
    D = 3
    with jax.enable_x64(True), mingru_jax.use_backend("eager"):
        k, h0, lg = _cell_inputs(cell, D, 1 if cell == "log" else D, seed=4)
        loss = _weights(5, (1, T, D), (N, D))

        def alone(k, h0, lg):
            h, _ = _cell(cell, LAYOUT.batch(k), LAYOUT.rows(h0), LAYOUT.batch(lg))
            zero = jnp.zeros((D,), k.dtype)
            return LAYOUT.unbatch(h), LAYOUT.finals(LAYOUT.last(h), lambda n: zero if h0 is None
                                                    else h0[n])

        packed = _with_grads(lambda *x: _cell(cell, *x, _cu()), loss, (0, 1, 2))
        _close(packed(k, h0, lg), _with_grads(alone, loss, (0, 1, 2))(k, h0, lg), 1e-11, cell)
        if cell == "log":  # without h_0 the log cell starts from a -inf slot
            _close(jax.jit(lambda k: _cell(cell, k, None, None, _cu()))(k),
                   jax.jit(lambda k: alone(k, None, None))(k), 1e-11, f"{cell} no h0")


# ----------------------------------------------------------------------------- kernel path


@pytest.mark.interpreter
@pytest.mark.parametrize("op", ["linear_recurrence", *CELLS])
def test_kernel_path_matches_eager(op):
    """The packed kernels (PACKED on, through Triton's interpreter; the walk and the look-back
    plans) against the packed eager path: outputs, final states and every gradient (the
    kernels never write the empty sequence's ``dh_0`` row, NaN-poisoned here: the launcher
    must zero it); without ``h_0`` (``HAS_H0`` off) and under ``vmap`` on the walk."""
    D = 3
    if op == "linear_recurrence":
        a, b, h0 = _rand(6, (1, T, D), (1, T, D), (N, D), dtype=np.float32)
        args, i = (jnp.tanh(a), b, h0), 2  # i: where h_0 sits

        def fn(a, b, h0, cu):
            return _lr_packed(a, b, h0, cu)
    else:
        args, i = _cell_inputs(op, D, D if op == "signed" else 1, seed=7, dtype=np.float32), 1

        def fn(k, h0, lg, cu):
            return _cell(op, k, h0, lg, cu)
    loss = _weights(8, (1, T, D), (N, D), dtype=np.float32)

    def value_and_grads(*args, no_h0=True):
        grads = jax.grad(lambda *x: loss(*fn(*x)), (0, 1, 2))(*args)
        without = fn(*args[:i], None, *args[i + 1:]) if no_h0 else None
        return fn(*args), grads, without

    with mingru_jax.use_backend("eager"):
        want = jax.jit(value_and_grads)(*args, _cu())
    for plan in PLANS:
        with mingru_jax.use_backend("triton"), switches.forced(
                "linear_recurrence" if op == "linear_recurrence" else "mingru_cell", **PLANS[plan]):
            walk = plan == "walk"
            got = jax.jit(lambda *x, walk=walk: value_and_grads(*x, no_h0=walk))(*args, _cu())
        _close(got if walk else got[:2], want if walk else want[:2], 2e-5, f"{op} {plan}")
    if op == "linear_recurrence":
        # vmap of packed kernel calls (one row each, run one after another).
        with mingru_jax.use_backend("triton"):
            many = jax.jit(jax.vmap(lambda a, b: _lr_packed(a, b, None, _cu())))(
                jnp.stack([args[0], 0.5 * args[0]]), jnp.stack([args[1], args[1]]))
        _close((many[0][0], many[1][0]), want[2], 2e-5, "vmap")


@pytest.mark.interpreter
@pytest.mark.filterwarnings("ignore:divide by zero encountered in log2:RuntimeWarning")
@pytest.mark.parametrize("plan", list(PLANS))
def test_parallel_scan_log_kernel_takes_minus_inf_coefficients(plan):
    """The packed log scan restarts with ``log a = -inf``: no NaN on the kernel path, forward
    or backward, and the eager numbers."""
    D = 2
    la, lv = _rand(9, (1, T, D), (1, T + N, D), dtype=np.float32)
    lv = lv.at[0, CU[2] + 2].set(-jnp.inf)  # sequence 2 starts from h_0 = 0
    w = _rand(10, (1, T, D), dtype=np.float32)[0]

    def value_and_grads(la, lv, cu):
        def f(la, lv):
            return mingru_jax.parallel_scan_log(-jnp.abs(la), lv, cu_seqlens=cu)
        return f(la, lv), jax.grad(lambda *x: (f(*x) * w).sum(), (0, 1))(la, lv)

    results = {}
    for mode in ("triton", "eager"):
        with mingru_jax.use_backend(mode), switches.forced("parallel_scan_log", **PLANS[plan]):
            results[mode] = jax.jit(value_and_grads)(la, lv, _cu())
    _close(results["triton"], results["eager"], 2e-5, plan)


# ----------------------------------------------------------------------------- scans


def _sum_loss(*outs):
    return sum((o * jnp.cos(jnp.arange(o.size)).reshape(o.shape)).sum() for o in outs)


@pytest.mark.usefixtures("on_host")
def test_scans_equal_each_sequence_alone():
    D, n, k, v = 2, 2, 3, 2
    L = LAYOUT
    with jax.enable_x64(True), mingru_jax.use_backend("eager"):
        a, b, la, lv = _rand(11, (1, T, D), (1, T, D), (1, T, D), (1, T + N, D))
        lv = lv.at[0, CU[3] + 3].set(-jnp.inf)  # sequence 3 starts from h_0 = 0
        A, Bm, M, bv = _rand(12, (1, T, n, k, k), (1, T, n, k, v), (1, T, n, 2, 2),
                             (1, T, n, 2))
        cases = {  # name: (packed op, its inputs)
            "linear_scan": (mingru_jax.linear_scan, (jnp.tanh(a), b)),
            "parallel_scan_log": (mingru_jax.parallel_scan_log, (-jnp.abs(la), lv)),
            "matrix_affine_scan": (mingru_jax.matrix_affine_scan, (0.6 * A, Bm)),
            "matrix_scan": (mingru_jax.matrix_scan, (0.6 * M, bv)),
        }
        for name, (op, xs) in cases.items():
            def packed(x, y, op=op):
                return op(x, y, cu_seqlens=_cu())

            def alone(x, y, op=op, name=name):
                y = y[0][L.vslot] if name == "parallel_scan_log" else L.batch(y)
                return tuple(map(L.unbatch, jax.tree.leaves(op(L.batch(x), y))))

            if name == "matrix_scan":  # matrix_affine_scan with v = 1: the forward suffices
                _close(jax.jit(packed)(*xs), jax.jit(alone)(*xs), 1e-11, name)
                continue
            got = _with_grads(packed, _sum_loss, (0, 1))(*xs)
            assert all(bool(jnp.isfinite(g).all()) for g in jax.tree.leaves(got)), name
            _close(got, _with_grads(alone, _sum_loss, (0, 1))(*xs), 1e-11, name)


# ----------------------------------------------------------------------------- mixers


MIXERS = {
    "log": ("MinGRU", dict(learnable_h0=True)),
    "signed": ("SignedMinGRU", dict(coupled=True, learnable_h0=True)),
    "rotation": ("RotationMinGRU", dict()),
    "givens": ("GivensMinGRU", dict(block_size=2, rounds=2)),
}
IN, HID = 3, 4


def _pure(module, run):
    """``f(params, *args) = run(module with params, *args)`` and the module's parameters."""
    graphdef, params, rest = nnx.split(module, nnx.Param, ...)
    return lambda p, *args: run(nnx.merge(graphdef, p, rest), *args), params


def _states(seed, size, shape=(N, 1)):
    return jnp.abs(_rand(seed, (*shape, size))[0]) + 0.1  # non-negative: valid for MinGRU too


@pytest.mark.usefixtures("on_host")
@pytest.mark.parametrize("decay", [None, "learnable"])
@pytest.mark.parametrize("name", list(MIXERS))
def test_mixers_equal_each_sequence_alone(name, decay):
    cls, kw = MIXERS[name]
    L = LAYOUT
    with jax.enable_x64(True), mingru_jax.use_backend("eager"):
        m = getattr(mingru_jax, cls)(IN, HID, **kw, decay=decay, param_dtype=jnp.float64,
                                     rngs=nnx.Rngs(1))
        if getattr(m, "h0", None) is not None:
            m.h0[...] = jnp.linspace(-0.8, 0.9, HID)
        (x,), h0 = _rand(13, (1, T, IN)), _states(14, HID)
        dt = None if decay is None else jnp.linspace(0.0, 2.0, T)[None]
        loss = _weights(15, (1, T, HID), (N, 1, HID))

        def packed(model, x, h0, cu):
            return model(x, h0, dt, True, cu_seqlens=cu)

        def alone(model, x, h0, cu):
            y = model(L.batch(x), L.rows(h0), L.batch(dt))
            start = model.initial_state(1, x.dtype)
            return L.unbatch(y), L.finals(L.last(y)[:, None], lambda n: start if h0 is None
                                          else h0[n])

        results = []
        for run in (packed, alone):
            f, params = _pure(m, run)
            if decay is None:  # outputs and states from the default initial states
                results.append(jax.jit(f)(params, x, None, _cu()))
            else:  # from given states, with the gradients of x, h_0 and every parameter
                results.append(_with_grads(f, loss, (0, 1, 2))(params, x, h0, _cu()))
        _close(results[0], results[1], 1e-10, f"{name} decay={decay}")
        state = results[0][1] if decay is None else results[0][0][1]
        assert state.shape == (N, 1, HID)


@pytest.mark.usefixtures("on_host")
def test_heterogeneous_stack_equal_each_sequence_alone():
    """A stack of blocks (``MinGRUBlock.__call__`` with ``cu_seqlens``) over three mixer
    kinds, one with decay, some layers given states: outputs, every layer's per-sequence final
    states and the gradients of ``x``, the states and the parameters. Equal non-empty lengths,
    so the unpacked batch's final states are each sequence's."""
    d, L = 4, LAYOUT_EQ
    steps = int(CU_EQ[-1])
    mk = {"givens": {"block_size": 2, "rounds": 2}, "log": {"decay": "learnable"}}
    with jax.enable_x64(True), mingru_jax.use_backend("eager"):
        stack = mingru_jax.MinGRUStack(IN, d, 3, mlp_expansion=1,
                                       mixer=["signed", "givens", "log"], mixer_kwargs=mk,
                                       param_dtype=jnp.float64, rngs=nnx.Rngs(3))
        (x,) = _rand(16, (1, steps, IN))
        dt = jnp.linspace(0.0, 3.0, steps)[None]
        s0 = [None, _states(17, d), _states(18, d)]
        wb, *ws = _rand(19, (1, steps, d), (N, 1, d), (N, 1, d), (N, 1, d))

        def loss(out, states):
            return (out * wb).sum() + sum((s * w).sum() for s, w in zip(states, ws, strict=True))

        def packed(model, x, s, cu):
            return model(x, s, dt, cu_seqlens=cu)

        def alone(model, x, s, cu):
            out, states = model(L.batch(x), [L.rows(r) for r in s], L.batch(dt))
            starts = [b.mixer.initial_state(1, x.dtype) for b in model.blocks]
            return L.unbatch(out), [
                L.finals(got, lambda n, r=r, st=st: st if r is None else r[n])
                for got, r, st in zip(states, s, starts, strict=True)]

        results = []
        for run in (packed, alone):
            f, params = _pure(stack, run)
            results.append(_with_grads(f, loss, (0, 1, 2))(params, x, s0, _cu(CU_EQ)))
        _close(results[0], results[1], 1e-10, "stack")
        assert [s.shape for s in results[0][0][1]] == [(N, 1, d)] * 3


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("bad, err", [
    (np.array([1, 3, 11], np.int32), ValueError),  # not starting at 0
    (np.array([0, 3, 10], np.int32), ValueError),  # not ending at T
    (np.array([0, 5, 3, 11], np.int32), ValueError),  # decreasing
    (np.array([0.0, 3.0, 11.0], np.float32), TypeError),  # float dtype
    (np.array([[0, 3, 11]], np.int32), ValueError),  # 2-D
    (np.array([0], np.int32), ValueError),  # no sequence
    ([0, 3, 11], TypeError),  # not an array
])
def test_bad_cu_seqlens(bad, err):
    a = jnp.full((1, T, 2), 0.5)
    k = jnp.zeros((1, T, 4))
    m = mingru_jax.GivensMinGRU(3, 2, block_size=2, rounds=1, rngs=nnx.Rngs(0))
    for call in (lambda: mingru_jax.linear_recurrence(a, a, cu_seqlens=bad),
                 lambda: mingru_jax.mingru_cell(k, cu_seqlens=bad),
                 lambda: mingru_jax.linear_scan(a, a, cu_seqlens=bad),
                 lambda: mingru_jax.parallel_scan_log(a, a, cu_seqlens=bad),
                 lambda: m(jnp.zeros((1, T, 3)), cu_seqlens=bad)):
        with pytest.raises(err, match="cu_seqlens"):
            call()


def test_bad_packed_shapes():
    a = jnp.full((2, T, 2), 0.5)
    with pytest.raises(ValueError, match="cu_seqlens.*batch size must be 1"):
        mingru_jax.linear_recurrence(a, a, cu_seqlens=_cu())
    with pytest.raises(ValueError, match="cu_seqlens.*batch size must be 1"):
        mingru_jax.signed_mingru_cell(jnp.zeros((2, T, 6)), cu_seqlens=_cu())
    with pytest.raises(ValueError, match=r"initial_state must have shape \(N, 2\)"):
        mingru_jax.linear_recurrence(a[:1], a[:1], jnp.zeros((1, 2)), cu_seqlens=_cu())
    with pytest.raises(ValueError, match=r"log_values must have shape \(1, T\+N, D\)"):
        mingru_jax.parallel_scan_log(a[:1], jnp.zeros((1, T + 1, 2)), cu_seqlens=_cu())
    m = mingru_jax.MinGRU(3, 2, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"h_0 must have shape \(N, 1, 2\)"):
        m(jnp.zeros((1, T, 3)), jnp.ones((1, 1, 2)), cu_seqlens=_cu())
