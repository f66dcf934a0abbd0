"""Sizes as symbols, and a step counted with them: what :mod:`helpers.symbolic` traces a step once with.

A size of a step traced with symbolic sizes is one sympy expression per value: the symbols' range, a storage's bytes
rounded up to 512 without comparing, and every expression written one way (:func:`canonical`), so that equal sizes
compare equal, as :mod:`helpers.depth` needs to write a deep model from shallow logs.  The step so traced
(:func:`helpers.traced.symbolic_step`) is counted by a :class:`SymbolicTracker` and read by
:func:`record_symbolic_step` into a :class:`SymbolicRecord`; its CPU convolutions choose no kernel by the batch
(:func:`no_cpu_kernel_choice`).  These sit below the step runner, so that the traced step (:mod:`helpers.traced`)
makes them itself: nothing above is called back.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass
from typing import Any

import sympy
import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass
from torch.utils._sympy.functions import Max, Min
from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

from .allocator.rules import K_MIN_BLOCK, round_up
from .config import StepConfig
from .engine.counting import LogEntry, StorageTracker
from .engine.meter import Meter
from .record import Allocation, Storage, frees_in_allocation_order, label_storages
from .shallow import ShallowStepTracker

#: The range of every symbolic size: bounded (unbounded, ``applySlice`` keeps identity slices), and above 1 (a
#: size of 1 is its own program).
LOW, HIGH = 2, 2**31 - 1
#: The lattice functions a size may hold (PyTorch's and sympy's): :func:`_lattice_decided` decides them.
_LATTICE = (Max, Min, sympy.Max, sympy.Min)


class RoundUp(sympy.Function):
    """``round_up(n)``: ``n`` bytes rounded up to a multiple of 512 (:func:`helpers.allocator.rules.round_up`), kept
    unevaluated while ``n`` is symbolic."""

    is_integer = True

    @classmethod
    def eval(cls, n):
        if n.is_Integer:
            return sympy.Integer(round_up(int(n)))
        return None


def canonical(value):
    """``value`` (an int, a ``SymInt`` or a sympy expression) as an int if it is one, else its expression expanded
    (``sympy.expand``) and its ``Max`` and ``Min`` decided where the symbols' range decides them
    (:func:`_lattice_decided`): equal sizes written alike (``8*s*(b - 1) + 8*s`` and ``8*b*s``)."""
    if isinstance(value, torch.SymInt):
        value = value.node.expr
    if isinstance(value, int):
        return value
    value = sympy.expand(value)
    if value.has(*_LATTICE):
        value = sympy.expand(_lattice_decided(value))
    return int(value) if value.is_Integer else value


def _lattice_decided(expr):
    """``expr`` with every ``Max`` or ``Min`` that equals one of its arguments wherever the symbols lie in
    ``[LOW, HIGH]`` replaced by that argument (``bound_sympy``, ``torch/utils/_sympy/value_ranges.py``), until none
    is left that the bounds decide.

    A storage's bytes worked out from its strides keep ``Max(1, stride)``, which sympy cannot decide alone: the
    memory-efficient attention's log-sum-exp in one block is ``36*B*Max(1, 32*c) - 4*Max(1, 32*c) + 128*c`` bytes and
    ``1152*B*c`` in the next (``c = CeilToInt(IntTrueDiv(S, 32))``), equal at every point, so :mod:`helpers.depth`
    found the blocks different and traced SmolLM2's 30 blocks in full.
    """
    ranges = {sym: ValueRanges(LOW, HIGH) for sym in expr.free_symbols}
    while True:
        decided = {}
        for node in expr.atoms(*_LATTICE):
            bounds = [bound_sympy(a, ranges) for a in node.args]
            for i, r in enumerate(bounds):
                others = bounds[:i] + bounds[i + 1:]
                if isinstance(node, (Max, sympy.Max)) and all(r.lower >= o.upper for o in others) or (
                        isinstance(node, (Min, sympy.Min)) and all(r.upper <= o.lower for o in others)):
                    decided[node] = node.args[i]
                    break
        if not decided:
            return expr
        expr = expr.xreplace(decided)


def storage_bytes(nbytes):
    """A storage's ``nbytes`` rounded up to 512 (:func:`helpers.allocator.rules.round_up`), comparing nothing: an
    int; an expression whose every coefficient is a multiple of 512 (a multiple of 512 at every integer point) as it
    is; else :class:`RoundUp` of it."""
    nbytes = canonical(nbytes)
    if isinstance(nbytes, int):
        return round_up(nbytes)
    coefficients = nbytes.as_coefficients_dict().values()
    if all(c.is_Integer and int(c) % K_MIN_BLOCK == 0 for c in coefficients):
        return nbytes
    return RoundUp(nbytes)


class NotSymbolic(ValueError):
    """This step cannot be traced with symbolic sizes, or its log does not hold at this point (the message says why)."""


@dataclass(frozen=True)
class Symbols:
    """The symbolic sizes a step is traced with (:func:`helpers.symbolic.trace`): ``env``, the ``ShapeEnv`` that
    made the symbols and records the guards; ``sizes``, the batch's sizes as the step runner takes them
    (:class:`helpers.step.StepRunner`'s ``sizes``: ``(batch,)``, or ``(batch, seq)`` for token inputs), each a
    ``SymInt``, or 1 where that size is fixed (its own regime)."""

    env: Any
    sizes: tuple


class SymbolicTracker(ShallowStepTracker):
    """The simulated GPU's tracker (:class:`helpers.shallow.ShallowStepTracker`, which also notes markers and parents)
    for symbolic sizes: each storage's bytes an expression (:func:`storage_bytes`), each change logged and nothing
    compared: ``allocated`` and ``peak`` stay 0 (the peak is the replay's, :func:`helpers.written.profile_of_log`).

    Raises:
        NotSymbolic: for a storage resized in place (FSDP's), whose change in bytes would be a comparison.
    """

    def track(self, t: torch.Tensor) -> int | None:
        if is_traceable_wrapper_subclass(t):
            return StorageTracker.track(self, t)  # its inner tensors, each through this method
        st = t.untyped_storage()
        serial = self._live.get(id(st))
        if serial is not None:
            return serial
        serial = len(self.sizes)
        nbytes = storage_bytes(st.nbytes())
        self.sizes[serial], self.dtypes[serial] = nbytes, t.dtype
        self.shapes[serial] = tuple(map(canonical, t.shape))
        self._live[id(st)] = serial
        self._change(serial, "alloc", nbytes)
        weakref.finalize(st, self._free, id(st))
        return serial

    def transient(self, nbytes, dtype: torch.dtype, shape) -> int:
        serial = len(self.sizes)
        nbytes = canonical(nbytes)
        self.sizes[serial], self.dtypes[serial], self.shapes[serial] = nbytes, dtype, tuple(map(canonical, shape))
        self._change(serial, "alloc", nbytes)
        return serial

    def _change(self, serial: int, kind: str, delta) -> None:
        self._now[serial] = delta if kind == "alloc" else 0  # only allocations and frees: resizes raise
        self.log.append(LogEntry(serial, kind, delta))

    def _resized(self, storage) -> None:
        if self._live.get(id(storage)) is not None and not self.paused:
            raise NotSymbolic("a storage is resized in place (FSDP): its change in bytes needs a comparison")

    def live_serials(self) -> tuple[int, ...]:
        return tuple(s for s in self._live.values() if self._now[s] != 0)


@dataclass
class SymbolicRecord:
    """What :func:`record_symbolic_step` keeps of a step traced with symbolic sizes, with the attributes
    :mod:`helpers.depth` reads of a profile: ``allocation_log`` and ``storages`` (bytes and shapes as expressions),
    and the fields of :class:`helpers.record.StepProfile` that do not depend on the sizes; ``conv_bytes``, each 2-D
    convolution pass's input + weight + output bytes (expressions), from which a point's ``cudnn_bound_bytes`` is
    worked out."""

    model: str
    config: StepConfig
    input_shape: tuple
    parameter_count: int
    params_without_grad: list
    paged_bytes: int
    allocation_log: list
    storages: dict
    conv_bytes: tuple = ()


def record_symbolic_step(meter: Meter, events, roles: dict, *, config: StepConfig, model: str, input_shape: tuple,
                         parameter_count: int, params_without_grad: list, reset_at: int | None = None,
                         paged_bytes: int = 0) -> SymbolicRecord:
    """:func:`helpers.record.record_step` for a symbolic trace (its arguments, the same categories and the same order
    of frees), summing and comparing nothing; the events are kept as the tracker's markers."""
    storages = meter.storages()
    labels = label_storages({s: n for s, (n, _, _) in storages.items()}, roles)
    cuts = [e.log_position for e in events] + ([] if reset_at is None else [reset_at])
    log = frees_in_allocation_order(meter.allocation_log(), cuts)
    return SymbolicRecord(
        model, config, tuple(map(canonical, input_shape)), parameter_count, list(params_without_grad), paged_bytes,
        [Allocation(serial, kind, delta, labels[serial], 0) for serial, kind, delta in log],
        {s: Storage(s, labels[s], dtype, shape, n) for s, (n, dtype, shape) in storages.items()})


@contextlib.contextmanager
def no_cpu_kernel_choice():
    """oneDNN (mkldnn) and NNPACK off, then as they were: a CPU convolution then runs PyTorch's own kernel at every
    batch size.

    A fake convolution asks which CPU kernel would run (``torch._C._select_conv_backend``) only to give its output that
    kernel's memory format (``conv`` in ``torch/_subclasses/fake_impls.py``).  With oneDNN on, the choice reads the batch
    (``ConvParams::use_mkldnn``, ``aten/src/ATen/native/Convolution.cpp``: ``input.size(0) >= 16``, "for 1x1 filters,
    MKLDNN is faster than THNN when multi-threaded, but THNN is faster when single-threaded"; ``use_nnpack`` has the same
    rule): a guard ``B < 16`` on every symbolic trace of a CNN.  Both kernels give a contiguous input a contiguous
    output (``_determine_backend_memory_format``: oneDNN goes channels-last only for a channels-last input or weight), so
    no allocation depends on the choice, and a GPU runs cuDNN anyway; ``tests/test_symbolic_equality.py`` checks CNN
    steps on both sides of 16 against concrete traces, which make the choice.
    """
    mkldnn = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False
    (nnpack,) = torch.backends.nnpack.set_flags(False)
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = mkldnn
        torch.backends.nnpack.set_flags(nnpack)
