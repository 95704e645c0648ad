"""Synthetic sequence tasks for the ``mingru train`` demo, generated on the fly.

Every task produces integer token sequences and a label per position, plus a mask saying
which positions are scored:

* ``parity`` — a bit stream; the label at ``t`` is the parity of bits ``1..t``. Needs a
  transition that can flip sign (a negative eigenvalue); a diagonal positive recurrence such
  as MinGRU's cannot track it at lengths beyond training.
* ``s3`` / ``s5`` — word problems on the symmetric groups S3 (6 elements, non-abelian) and
  S5 (120 elements, non-solvable): tokens are group elements, the label at ``t`` is the
  running product ``x_t ∘ ⋯ ∘ x_1``. Needs rotation-like (orthogonal) transitions.
* ``mqar`` — multi-query associative recall: ``n_pairs`` key–value pairs, then filler with
  the keys asked again at random positions; the label at a query is the value stored with
  that key. Needs a matrix-valued (associative) memory such as the delta rule.
* ``selective-copy`` — selective copying (:class:`SelectiveCopyTask`): tokens scattered among
  filler, then as many query tokens; the label at the i-th query is the i-th scattered token.
* ``lm`` — next-byte prediction on a text file (:class:`ByteText`, ``--task lm --data FILE``):
  random windows of the file's first bytes for training, its last bytes held out.

The data is generated with NumPy on the host, so both training paths (PyTorch and Flax) share
it and neither framework is needed to make it.

Example:
    >>> import numpy as np
    >>> from mingru_cli.tasks import make_task
    >>> task = make_task("parity")
    >>> batch = task.sample(4, 16, np.random.default_rng(0))
    >>> batch.tokens.shape, batch.labels.shape, batch.mask.shape
    ((4, 16), (4, 16), (4, 16))
"""

from __future__ import annotations

import hashlib
import itertools
import math
from dataclasses import dataclass

import numpy as np

from mingru_cli.config import TASKS

__all__ = [
    "TASKS",
    "Batch",
    "GroupWordTask",
    "MQARTask",
    "ByteText",
    "ParityTask",
    "SelectiveCopyTask",
    "Task",
    "make_task",
    "permutation_table",
    "selective_copy_layout",
    "uniform_subsets",
]


@dataclass
class Batch:
    """One batch: ``tokens (B, T)`` int64 inputs, ``labels (B, T)`` int64 targets (``-100``
    where unscored), ``mask (B, T)`` bool — the positions that count for loss and accuracy."""

    tokens: np.ndarray
    labels: np.ndarray
    mask: np.ndarray


class Task:
    """A sequence labelling task: ``vocab_size`` input tokens, ``n_classes`` output classes."""

    name: str = ""
    vocab_size: int = 0
    n_classes: int = 0
    min_length: int = 1

    def sample(self, batch: int, length: int, rng: np.random.Generator) -> Batch:
        """Draw ``batch`` sequences of ``length`` tokens from ``rng``."""
        raise NotImplementedError

    def check_length(self, length: int) -> None:
        if not isinstance(length, int) or length < self.min_length:
            raise ValueError(
                f"length for task {self.name!r} must be an int ≥ {self.min_length}; got {length!r}"
            )

    def describe(self) -> str:
        return self.name

    @property
    def chance(self) -> float:
        """The accuracy of a uniform guess among the labels that occur."""
        return 1.0 / self.n_classes


class ParityTask(Task):
    """Running parity of a bit stream; every position is scored (chance = 0.5)."""

    name = "parity"
    vocab_size = 2
    n_classes = 2

    def sample(self, batch: int, length: int, rng: np.random.Generator) -> Batch:
        self.check_length(length)
        bits = rng.integers(0, 2, (batch, length), dtype=np.int64)
        labels = np.cumsum(bits, axis=1) % 2
        return Batch(bits, labels, np.ones(bits.shape, dtype=bool))


def permutation_table(n: int) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """The elements of the symmetric group S_n (lexicographic order; index 0 is the identity)
    and the composition table ``table[i, j]`` = index of ``p_i ∘ p_j`` (apply ``p_j`` first)."""
    perms = list(itertools.permutations(range(n)))
    index = {p: i for i, p in enumerate(perms)}
    table = np.empty((len(perms), len(perms)), dtype=np.int64)
    for i, p in enumerate(perms):
        for j, q in enumerate(perms):
            table[i, j] = index[tuple(p[q[m]] for m in range(n))]
    return perms, table


class GroupWordTask(Task):
    """Word problem on S_n: the label at ``t`` is the index of ``x_t ∘ x_{t-1} ∘ ⋯ ∘ x_1``.

    Every position is scored (chance = ``1 / n!``).
    """

    def __init__(self, n: int) -> None:
        if n not in (3, 4, 5):
            raise ValueError(f"group size n must be 3, 4 or 5; got {n!r}")
        self.n = n
        self.name = f"s{n}"
        self.elements, self.table = permutation_table(n)
        self.vocab_size = self.n_classes = len(self.elements)

    def sample(self, batch: int, length: int, rng: np.random.Generator) -> Batch:
        self.check_length(length)
        tokens = rng.integers(0, self.vocab_size, (batch, length), dtype=np.int64)
        labels = np.empty_like(tokens)
        state = np.zeros(batch, dtype=np.int64)  # the identity
        for t in range(length):
            # A sequential left-multiplication: a table lookup per step is cheap and exact.
            state = self.table[tokens[:, t], state]
            labels[:, t] = state
        return Batch(tokens, labels, np.ones(tokens.shape, dtype=bool))


class MQARTask(Task):
    """Multi-query associative recall.

    Layout of one sequence of length ``T``: ``n_pairs`` key–value pairs ``k₁ v₁ … k_N v_N``
    (distinct keys, values drawn independently), then ``T − 2N`` positions of a filler token
    among which every key is asked once more, in random order, at random positions. The label
    at a query is its value's class; only query positions are scored (chance = ``1 / n_values``).
    Longer sequences keep the same pairs and queries and add filler, so length generalization
    means holding the memory over longer gaps.

    Token ids: 0 = filler, ``1 … n_keys`` = keys, ``n_keys+1 … n_keys+n_values`` = values.
    """

    name = "mqar"

    def __init__(self, n_pairs: int = 8, n_keys: int = 32, n_values: int = 32) -> None:
        if n_pairs < 1 or n_keys < n_pairs or n_values < 2:
            raise ValueError(
                "mqar needs n_pairs ≥ 1, n_keys ≥ n_pairs and n_values ≥ 2; got "
                f"n_pairs={n_pairs}, n_keys={n_keys}, n_values={n_values}"
            )
        self.n_pairs, self.n_keys, self.n_values = n_pairs, n_keys, n_values
        self.vocab_size = 1 + n_keys + n_values
        self.n_classes = n_values
        self.min_length = 3 * n_pairs

    def describe(self) -> str:
        return f"mqar(n_pairs={self.n_pairs}, n_keys={self.n_keys}, n_values={self.n_values})"

    def sample(self, batch: int, length: int, rng: np.random.Generator) -> Batch:
        self.check_length(length)
        N = self.n_pairs
        keys = np.argsort(rng.random((batch, self.n_keys)), axis=1)[:, :N]
        values = rng.integers(0, self.n_values, (batch, N), dtype=np.int64)
        tokens = np.zeros((batch, length), dtype=np.int64)
        labels = np.full((batch, length), -100, dtype=np.int64)
        tokens[:, 0 : 2 * N : 2] = keys + 1
        tokens[:, 1 : 2 * N : 2] = values + 1 + self.n_keys
        # Query slots: N distinct positions in the tail, sorted; pair j asked in random order.
        tail = length - 2 * N
        slots = np.argsort(rng.random((batch, tail)), axis=1)[:, :N]
        slots = np.sort(slots, axis=1) + 2 * N
        order = np.argsort(rng.random((batch, N)), axis=1)
        rows = np.arange(batch)[:, None]
        tokens[rows, slots] = np.take_along_axis(keys, order, axis=1) + 1
        labels[rows, slots] = np.take_along_axis(values, order, axis=1)
        return Batch(tokens, labels, labels >= 0)


def uniform_subsets(rows: int, size: int, population: int, *,
                    rng: np.random.Generator) -> np.ndarray:
    """``(rows, size)`` int64: each row a uniformly drawn ``size``-subset of
    ``range(population)``, sorted.

    Where repeats are rare (``size² ≤ population``), each row is ``size`` independent uniform
    draws, drawn again while two coincide: conditioned on being distinct, the draws are a
    uniform subset, and at the paper's 16 of 4096 a row is drawn again 3 % of the time. That
    costs ``rows · size`` draws where the fallback, the ``size`` smallest of ``population``
    uniform keys per row, costs ``rows · population`` draws and a partition of them.

    Example:
        >>> import numpy as np
        >>> uniform_subsets(2, 3, 100, rng=np.random.default_rng(0)).shape
        (2, 3)
    """
    if size * size > population:
        keys = rng.random((rows, population))
        return np.sort(np.argpartition(keys, size - 1, axis=1)[:, :size], axis=1)
    picked = np.empty((rows, size), dtype=np.int64)
    redraw = np.ones(rows, dtype=bool)
    while redraw.any():
        picked[redraw] = np.sort(rng.integers(0, population, (int(redraw.sum()), size)), axis=1)
        redraw = (np.diff(picked, axis=1) == 0).any(axis=1)
    return picked


def selective_copy_layout(tokens: np.ndarray, positions: np.ndarray, *, length: int,
                          vocab_size: int) -> Batch:
    """The selective-copy sequences that hold ``tokens (B, n)`` at ``positions (B, n)`` (sorted,
    distinct, in ``[0, length)``) of ``length`` filler tokens (``vocab_size - 1``), followed by
    ``n`` query tokens (``0``); the labels are the tokens, in order, at the queries.

    Returns a :class:`Batch` of shape ``(B, length + n)``.

    Example:
        >>> import numpy as np
        >>> b = selective_copy_layout(np.array([[3, 7]]), np.array([[1, 4]]), length=6, vocab_size=16)
        >>> b.tokens.tolist(), b.labels.tolist()
        ([[15, 3, 15, 15, 7, 15, 0, 0]], [[-100, -100, -100, -100, -100, -100, 3, 7]])
    """
    batch, n = tokens.shape
    rows = np.arange(batch)[:, None]
    sequence = np.full((batch, length + n), vocab_size - 1, dtype=np.int64)
    sequence[rows, positions] = tokens
    sequence[:, length:] = 0
    labels = np.full((batch, length + n), -100, dtype=np.int64)
    labels[:, length:] = tokens
    return Batch(sequence, labels, labels >= 0)


class SelectiveCopyTask(Task):
    """Selective copying, the task of the Mamba paper (Gu & Dao 2023) as the minGRU paper (Feng
    et al. 2024, arXiv:2410.01201) trains it.

    One sequence for ``length`` L: L data positions of the filler token ``vocab_size - 1``,
    except ``n_copy`` positions (distinct, uniformly drawn, in increasing order) that hold the
    tokens to copy, each uniform in ``1 … vocab_size - 2``; then ``n_copy`` query tokens ``0``.
    The label at the i-th query is the i-th placed token; only the queries are scored (chance
    ``1 / (vocab_size - 2)``). ``length`` is the data region, so a sequence has
    ``length + n_copy`` tokens (the paper's 4096 + 16). The model predicts over the whole
    vocabulary (``n_classes = vocab_size``), as the official code's 16 outputs do.

    From the official code (BorealisAI/minRNNs: ``data/selective_copy.py``, ``utils/data.py``,
    ``configs/selective_copy.yaml``): "sequence length 4096" is the data region before the 16
    queries; the loss is the cross-entropy at the 16 query positions only, and accuracy is per
    token there. "Expansion 6", the official minGRU's hidden state of 6 · d_model = 384
    projected back to d_model, is ``--mixer-expansion 6`` (set by the preset). What ``mingru
    train`` cannot match (``--preset paper-selective-copy``):

    * Normalisation: RMSNorm there, LayerNorm in our blocks.
    * Weight decay: 0.05 on every parameter but the recurrence's input projections there; on
      every parameter here.
    * Dropout 0.1 sits only in the feed-forward block there, which this configuration turns
      off, so it never acts; ours acts on each block's mixer output.
    * The learned initial state starts from a normal draw there, from zero here.

    As there, the reported accuracy is that of the checkpoint with the best validation accuracy
    (the official ``--mode test`` loads that one), on sequences drawn apart from the validation
    set.

    Example:
        >>> import numpy as np
        >>> task = SelectiveCopyTask(n_copy=3, vocab_size=6)
        >>> batch = task.sample(2, 8, np.random.default_rng(0))
        >>> batch.tokens.shape, int(batch.mask.sum())
        ((2, 11), 6)
    """

    name = "selective-copy"

    def __init__(self, n_copy: int = 16, vocab_size: int = 16) -> None:
        if n_copy < 1 or vocab_size < 3:
            raise ValueError(f"selective-copy needs copy_tokens ≥ 1 and copy_vocab ≥ 3; got "
                             f"copy_tokens={n_copy}, copy_vocab={vocab_size}")
        self.n_copy, self.vocab_size, self.n_classes = n_copy, vocab_size, vocab_size
        self.min_length = n_copy

    @property
    def chance(self) -> float:
        return 1.0 / (self.vocab_size - 2)

    def describe(self) -> str:
        return (f"selective-copy(copy {self.n_copy} tokens of {self.vocab_size - 2}, "
                f"vocabulary {self.vocab_size})")

    def sample(self, batch: int, length: int, rng: np.random.Generator) -> Batch:
        self.check_length(length)
        tokens = rng.integers(1, self.vocab_size - 1, (batch, self.n_copy), dtype=np.int64)
        return selective_copy_layout(tokens, uniform_subsets(batch, self.n_copy, length, rng=rng),
                                     length=length, vocab_size=self.vocab_size)


class ByteText(Task):
    """Next-byte prediction on a text: the label at ``t`` is byte ``t + 1`` (vocabulary: the
    256 byte values; every position is scored).

    The split is fixed: the last ``val_fraction`` of the bytes (rounded, at least one) are
    the validation split, the rest the training split. :meth:`sample` draws windows at random
    offsets of the training split; :meth:`validation` cuts the validation split into long
    stretches, the same every time. :attr:`sha256` is the hex digest of the whole text.

    Example:
        >>> import numpy as np
        >>> from mingru_cli.tasks import ByteText
        >>> text = ByteText(b"abcdefghijklmnopqrst", val_fraction=0.25)
        >>> len(text.train), len(text.val)
        (15, 5)
        >>> batch = text.sample(2, 4, np.random.default_rng(0))
        >>> bool((batch.tokens[:, 1:] == batch.labels[:, :-1]).all())
        True
        >>> val = text.validation(rows=2)  # the 4 predicted bytes q r s t, in 2 stretches
        >>> [bytes(row.tolist()) for row in val.tokens], [bytes(row.tolist()) for row in val.labels]
        ([b'pq', b'rs'], [b'qr', b'st'])
        >>> text.validation(rows=2, max_bytes=2).labels.tolist()  # the first byte of each
        [[113], [115]]
    """

    name = "lm"
    vocab_size = 256
    n_classes = 256

    def __init__(self, data: bytes, val_fraction: float = 0.1, source: str = "") -> None:
        if len(data) < 2:
            raise ValueError(f"a text of at least 2 bytes is needed; got {len(data)}")
        n_val = min(len(data) - 1, max(1, round(len(data) * val_fraction)))
        tokens = np.frombuffer(data, dtype=np.uint8).astype(np.int64)
        self.train, self.val = tokens[:-n_val], tokens[-n_val:]
        self.val_fraction, self.source = val_fraction, source
        self.sha256 = hashlib.sha256(data).hexdigest()

    @classmethod
    def from_file(cls, path: str, val_fraction: float, seq_len: int) -> ByteText:
        """The text of file ``path``; errors name ``--data`` (missing, empty, or too short
        for windows of ``seq_len + 1`` bytes in both splits)."""
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise ValueError(f"--data {path!r} cannot be read: {exc.strerror or exc}") from None
        if not data:
            raise ValueError(f"--data {path!r} is empty: give a text file to train on")
        text = cls(data, val_fraction, source=path) if len(data) >= 2 else None
        if text is None or min(len(text.train), len(text.val)) < seq_len + 1:
            need = math.ceil((seq_len + 1) / min(val_fraction, 1 - val_fraction))
            raise ValueError(
                f"--data {path!r} is too short: {len(data)} bytes, and windows of --seq-len "
                f"{seq_len} + 1 bytes in both the training split and the validation split (the "
                f"last {val_fraction:.0%}) need at least {need}"
            )
        return text

    def sample(self, batch: int, length: int, rng: np.random.Generator) -> Batch:
        self.check_length(length)
        starts = rng.integers(0, len(self.train) - length, batch)
        return self._windows(self.train, starts, length)

    def validation(self, rows: int, max_bytes: int | None = None) -> Batch:
        """The bytes of the validation split to score, as ``rows`` stretches (a model reads
        each from a fresh state, carrying its state to the stretch's end).

        Every byte but the split's first is predicted from the bytes before it: ``M =
        len(val) - 1`` bytes, cut into ``rows`` segments of consecutive bytes (segment ``r``
        predicts bytes ``⌊r·M/rows⌋ + 1 … ⌊(r+1)·M/rows⌋`` of the split). With ``max_bytes``
        (``None``: all) below ``M``, row ``r`` scores the first ``⌊max_bytes/rows⌋`` bytes of
        segment ``r`` only: an evenly spread, fixed subset of ``rows·⌊max_bytes/rows⌋`` bytes.
        ``rows`` is at most the number of bytes scored. Rows are padded to the longest (label
        ``-100``, mask False); the mask's sum is the number of bytes scored.
        """
        if not isinstance(rows, int) or rows < 1:
            raise ValueError(f"rows must be an int ≥ 1; got {rows!r}")
        if max_bytes is not None and (not isinstance(max_bytes, int) or max_bytes < 1):
            raise ValueError(f"max_bytes must be None or an int ≥ 1; got {max_bytes!r}")
        predicted = len(self.val) - 1
        scored = predicted if max_bytes is None else min(max_bytes, predicted)
        rows = min(rows, scored)
        edges = np.arange(rows + 1) * predicted // rows
        lengths = np.diff(edges) if scored == predicted else np.full(rows, scored // rows)
        offsets = np.arange(int(lengths.max()))
        mask = offsets < lengths[:, None]
        inputs = np.minimum(edges[:-1, None] + offsets, predicted - 1)
        labels = np.where(mask, self.val[inputs + 1], -100)
        return Batch(np.where(mask, self.val[inputs], 0), labels, mask)

    def check_length(self, length: int) -> None:
        super().check_length(length)
        if min(len(self.train), len(self.val)) < length + 1:
            raise ValueError(f"length {length} needs windows of {length + 1} bytes; the splits "
                             f"hold {len(self.train)} and {len(self.val)}")

    def split(self) -> dict[str, int | float | str]:
        """The split as ``train.json`` records it."""
        return {"data": self.source, "sha256": self.sha256, "bytes": len(self.train) + len(self.val),
                "train_bytes": len(self.train), "val_bytes": len(self.val),
                "val_fraction": self.val_fraction, "val_start": len(self.train)}

    def describe(self) -> str:
        return f"lm({self.source!r}, {len(self.train) + len(self.val)} bytes)"

    @staticmethod
    def _windows(tokens: np.ndarray, starts: np.ndarray, length: int) -> Batch:
        windows = tokens[starts[:, None] + np.arange(length + 1)]
        return Batch(windows[:, :-1], windows[:, 1:], np.ones((len(starts), length), dtype=bool))


def make_task(name: str, **kwargs: int) -> Task:
    """Build a task by name: ``parity``, ``s3``, ``s5``, ``mqar`` or ``selective-copy``
    (kwargs go to :class:`MQARTask` or :class:`SelectiveCopyTask`)."""
    if name == "parity":
        return ParityTask()
    if name in ("s3", "s4", "s5"):
        return GroupWordTask(int(name[1]))
    if name == "mqar":
        return MQARTask(**kwargs)
    if name == "selective-copy":
        return SelectiveCopyTask(**kwargs)
    raise ValueError(f"task must be one of {', '.join(TASKS)}; got {name!r}")
