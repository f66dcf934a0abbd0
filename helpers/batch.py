"""Memory against batch size: the affine law, and the largest batch that fits (lesson 01).

Every allocation of a step is independent of the batch size ``b`` (model states) or proportional to it (activations,
the batch, their gradients), so the memory at each moment is affine in ``b`` and the peak is a maximum of affine
functions, ``M(b) = max_t (c_t + b * s_t)``: for all but the smallest batches one moment wins, ``M(b) = M0 + b * m``.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from .engine.backends import get_backend
from .config import StepConfig, check_int
from .gpus import CUDA_OVERHEAD_BYTES, headroom
from .record import StepProfile
from .profile import DoesNotFit, concrete_step, profile_step
# a step's verdict on each card, without torch (helpers.verdicts); its names are also this module's
from .verdicts import (CONV_MODULES, MATMUL_MODULES, Estimate, card_verdicts, cublas_handles,  # noqa: F401
                       has_convolutions, reserved_estimate)


@dataclass(frozen=True)
class AffineFit:
    """A least-squares line through (batch size, peak bytes) points: the intercept ``m0_bytes`` (M0, bytes at batch size
    0), the slope ``per_sample_bytes`` (m), the points fitted (``batch_sizes``, ``peak_bytes``), and
    ``max_residual_bytes``, the largest distance of a point from the line."""

    m0_bytes: float
    per_sample_bytes: float
    batch_sizes: tuple[int, ...]
    peak_bytes: tuple[int, ...]
    max_residual_bytes: float

    def predict(self, batch_size: float) -> float:
        """Peak bytes the line predicts at ``batch_size``."""
        return self.m0_bytes + batch_size * self.per_sample_bytes

    def largest_batch(self, capacity: int, overhead: int = CUDA_OVERHEAD_BYTES, *, cublas_handles: int = 2) -> int:
        """The largest batch size whose predicted peak fits :func:`helpers.gpus.headroom` of a GPU of ``capacity``
        bytes, with ``overhead`` bytes besides tensors and, on a card of :data:`helpers.gpus.GPU_CARDS`, the workspaces
        of ``cublas_handles`` (2 for training, 1 for a forward under ``no_grad``); 0 if not even the model state fits.

        Raises:
            ValueError: if the slope is not positive.
        """
        if self.per_sample_bytes <= 0:
            raise ValueError("the fitted memory does not grow with the batch size")
        room = headroom(capacity, overhead, cublas_handles=cublas_handles)
        return max(int((room - self.m0_bytes) // self.per_sample_bytes), 0)


def fit_affine(batch_sizes, peak_bytes) -> AffineFit:
    """Fit ``peak = M0 + b * m`` by least squares.

    Raises:
        ValueError: for fewer than two different batch sizes, or lists of different lengths.
    """
    xs, ys = [float(b) for b in batch_sizes], [float(p) for p in peak_bytes]
    if len(xs) != len(ys):
        raise ValueError(f"{len(xs)} batch sizes but {len(ys)} peaks")
    if len(set(xs)) < 2:
        raise ValueError("fitting a line needs at least two different batch sizes")
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    intercept = my - slope * mx
    residual = max(abs(y - (intercept + slope * x)) for x, y in zip(xs, ys))
    return AffineFit(intercept, slope, tuple(batch_sizes), tuple(peak_bytes), residual)


def model_state_estimate(parameters: int, optimizer: str, batch_size: int = 1, fused: bool = False) -> Estimate:
    """The peak of a training step's model states alone, from a count of ``parameters`` (>= 1).

    Per parameter at ``optimizer.step()``: 4 bytes of float32 parameter, 4 of gradient, the optimizer's state
    (:data:`helpers.techniques.optimizers.STATE_BYTES`) and, unless ``fused``, the ``foreach`` temporaries
    (``STEP_TEMPORARY_BYTES``).  No activations, no 512-byte rounding; ``batch_size`` is only recorded.

    Raises:
        ValueError: for a count below 1, an optimizer not of :data:`helpers.config.OPTIMIZERS`, or a paged one (its
            states of 100,000 elements or more are outside device memory: ``profile_step`` tells them apart).
    """
    from .techniques.optimizers import STATE_BYTES, STEP_TEMPORARY_BYTES

    check_int("parameters", parameters, 1)
    if optimizer not in STATE_BYTES:
        raise ValueError(f"unknown optimizer {optimizer!r}; use one of {', '.join(STATE_BYTES)}")
    if optimizer.startswith("paged-"):
        raise ValueError(f"{optimizer!r} keeps its large states in unified memory, outside the device's count: "
                         f"profile the step (profile_step) to tell them apart")
    categories = {"parameters": 4 * parameters, "gradients": 4 * parameters,
                  "optimizer_states": STATE_BYTES[optimizer] * parameters,
                  "other": 0 if fused else STEP_TEMPORARY_BYTES[optimizer] * parameters}
    return Estimate(batch_size, sum(categories.values()), categories,
                    "optimizer step (model states only: a parameter count says nothing of the activations)",
                    True, "formula")


class PeakCurve:
    """The peak memory of one training configuration, for any batch size.

    Traces some batch sizes and interpolates between two whose peaks came at the same allocation
    (:attr:`helpers.record.StepProfile.peak_allocation`): that moment, affine in ``b``, is then the maximum all along
    the interval (convexity), exact up to the 512-byte rounding.  Otherwise, and on a real GPU always, it traces.

    Args:
        model: as for :func:`helpers.profile.profile_step`, or a whole :class:`helpers.config.StepConfig` (its batch size
            is ignored).
        device: ``"auto"``, ``"cuda"`` or ``"simulated"``.
        **options: other :class:`helpers.config.StepConfig` options; ``steady_state`` defaults to True (what must fit
            is every step).

    Attributes:
        config, backend: the configuration traced; ``"cuda"`` or ``"simulated"``.
        traces: batch size -> :class:`helpers.record.StepProfile`.

    Raises:
        ValueError: for a bad option, or as ``profile_step`` does.
    """

    def __init__(self, model="resnet18", device: str = "auto", **options):
        if isinstance(model, StepConfig):
            self.config = model
        else:
            self.config = StepConfig(model=model, device=device, **{"steady_state": True, **options})
        self.runtime = get_backend(self.config.device)
        self.backend = self.runtime.name
        self.traces: dict[int, StepProfile] = {}
        self._sizes: list[int] = []  # traced batch sizes, sorted

    def concrete(self, batch_size: int) -> StepProfile:
        """A concrete trace at ``batch_size`` (:func:`helpers.profile.concrete_step`: the kept answer where it was traced
        or written, else a new trace; a real GPU's, as :meth:`trace`), never evaluated from a symbolic log: what
        confirms a search's answer (:func:`largest_fit`'s ``confirm_at``).

        Raises:
            DoesNotFit: if a real GPU runs out of memory.
        """
        config = self.config.replace(batch_size=batch_size, device=self.backend)
        return profile_step(config) if self.runtime.measured else concrete_step(config)

    def trace(self, batch_size: int) -> StepProfile:
        """The direct trace at ``batch_size`` (cached).

        Raises:
            DoesNotFit: if a real GPU runs out of memory.
        """
        if batch_size not in self.traces:
            self.traces[batch_size] = profile_step(self.config.replace(batch_size=batch_size, device=self.backend))
            bisect.insort(self._sizes, batch_size)
        return self.traces[batch_size]

    def estimate(self, batch_size: int) -> Estimate:
        """The peak at ``batch_size``, interpolated where exact, else traced; a real GPU's out of memory is returned as
        an estimate with ``error`` set.

        Raises:
            ValueError: for a batch size below 1 or a configuration ``profile_step`` refuses.
        """
        check_int("batch_size", batch_size, 1)
        if not self.runtime.measured and batch_size not in self.traces:
            i = bisect.bisect(self._sizes, batch_size)
            if 0 < i < len(self._sizes):
                lo, hi = self.traces[self._sizes[i - 1]], self.traces[self._sizes[i]]
                if lo.peak_allocation == hi.peak_allocation:
                    return _interpolate(lo, hi, batch_size)
        try:
            profile = self.trace(batch_size)
        except DoesNotFit as e:
            return Estimate(batch_size, None, backend=self.backend, error=e.cuda_message or str(e))
        return Estimate.of(profile)


def _interpolate(lo: StepProfile, hi: StepProfile, b: int) -> Estimate:
    t = (b - lo.batch_size) / (hi.batch_size - lo.batch_size)

    def between(a: int, c: int) -> int:
        return round(a + (c - a) * t)

    categories = {k: between(lo.categories[k], hi.categories[k]) for k in lo.categories}
    return Estimate(b, between(lo.peak_allocated_bytes, hi.peak_allocated_bytes), categories,
                    hi.peak.label, False, lo.backend, cublas_handles=cublas_handles(lo),
                    convolutions=has_convolutions(lo), paged_bytes=lo.paged_bytes, workspaces=lo.config.workspaces,
                    cudnn_bound=None if lo.cudnn_bound_bytes is None or hi.cudnn_bound_bytes is None
                    else between(lo.cudnn_bound_bytes, hi.cudnn_bound_bytes))


def largest_fit(estimate_at, lowest: int, highest: int, capacity: int, card: str | None = None,
                start: int | None = None, confirm_at=None) -> tuple[int, dict[int, Estimate]]:
    """``(n, estimates)``: the largest ``n`` (a batch size or sequence length) from ``lowest`` to ``highest`` whose step
    fits ``capacity`` (0 when not even ``lowest`` fits), and every estimate judged, by ``n`` (``estimates[n + 1]``
    exists unless ``n`` is ``highest`` or 0).

    The peak grows with ``n``, a maximum of affine functions of it: the line through the last two traced points
    (:func:`fit_affine`) predicts the answer, each prediction traced (``estimate_at``: ``n -> Estimate`` of a direct
    trace) and judged (:meth:`Estimate.verdict`; a ``card`` of :data:`helpers.gpus.GPU_CARDS` adds its lines), bisecting
    where a line makes no progress. ``start``: the ``n`` judged first instead of ``lowest`` (a widget's shown value,
    traced already; if it fits, every smaller ``n`` does).  ``confirm_at``: ``n -> Estimate`` of a concrete trace, where
    ``estimate_at``'s may be evaluated from a symbolic log (:mod:`helpers.evaluated`): the answer and the ``n`` just
    beyond are traced again by it and must give the same estimates, else the whole search is run again on
    ``confirm_at`` alone.  The search does not say it asks many points (:func:`helpers.profile.many_points`): it judges
    about four sizes, which a symbolic trace (two to four concrete ones) does not repay on a first run (measured with
    ``benchmarks/finetune_widget.py``, CPU seconds on the loaded 2-core machine: the fine-tuning widget's two LoRA
    searches 42.1 and 38.9 s concrete, 66.1 and 54.4 s traced symbolically at their second size, in a window where its
    concrete control changes took 1.25-1.4x as long); a log already kept (:mod:`helpers.evaluated`) answers it all
    the same.

    Raises:
        ValueError: for a bad range (``1 <= lowest <= highest``), or as ``estimate_at`` does.
    """
    check_int("lowest", lowest, 1)
    check_int("highest", highest, lowest)
    n, seen = _search(estimate_at, lowest, highest, capacity, card, start)
    if confirm_at is None:
        return n, seen
    n, seen, _ = confirm_fit(n, seen, confirm_at, lowest, highest, capacity, card, start)
    return n, seen


def confirm_fit(found: int, seen: dict[int, Estimate], confirm_at, lowest: int, highest: int, capacity: int,
                card: str | None = None, start: int | None = None) -> tuple[int, dict[int, Estimate], bool]:
    """``(n, estimates, same)``: :func:`largest_fit`'s answer ``found`` (with ``estimates`` ``seen``, searched without
    ``confirm_at``) confirmed as :func:`largest_fit` confirms it: ``found`` and ``found + 1`` (those in the range)
    estimated again by ``confirm_at`` (``n -> Estimate`` of a concrete trace); equal to ``seen``'s, the answer stands
    (``same`` True; ``estimates`` a copy of ``seen`` holding the concrete ones); else the whole search is run again on
    ``confirm_at`` alone, and its answer given (``same`` False).  What a widget runs after it has shown ``found``.

    Raises:
        ValueError: as ``confirm_at`` does.
    """
    seen = dict(seen)
    for m in (found, found + 1):  # the answer and the size just beyond, traced concretely
        if lowest <= m <= highest:
            concrete = confirm_at(m)
            if seen.get(m) != concrete:
                return (*_search(confirm_at, lowest, highest, capacity, card, start), False)
            seen[m] = concrete
    return found, seen, True


def _search(estimate_at, lowest: int, highest: int, capacity: int, card: str | None,
            start: int | None) -> tuple[int, dict[int, Estimate]]:
    """:func:`largest_fit`'s search, on ``estimate_at`` alone."""
    seen: dict[int, Estimate] = {}
    order: list[int] = []

    def fits(n: int) -> bool:
        if n not in seen:
            seen[n] = estimate_at(n)
            order.append(n)
        return seen[n].verdict(capacity, card).fits

    lo, hi = (start if start is not None and lowest < start <= highest else lowest), highest + 1  # lo judged first
    if not fits(lo):  # from here on lo fits; hi does not (or lies beyond the range)
        if lo == lowest or not fits(lowest):
            return 0, seen
        lo, hi = lowest, lo
    n = min(hi - 1, 4 * lo)
    for _ in range(4 * highest.bit_length() + 8):
        if n != lo:
            if fits(n):
                lo = max(lo, n)
            else:
                hi = min(hi, n)
        if hi - lo <= 1:
            return lo, seen
        same = [m for m in order if seen[m].where == seen[order[-1]].where]  # the same moment peaks
        x1, x2 = same[-2:] if len(same) > 1 else order[-2:]
        e1, e2 = seen[x1], seen[x2]
        y1, y2 = (e.reserved_bytes if e.reserved_bytes is not None else e.peak_bytes for e in (e1, e2))
        try:
            v = e2.verdict(capacity, card)  # its overhead; headroom() leaves out a listed card's cuBLAS workspaces
            guess = fit_affine([x1, x2], [y1, y2]).largest_batch(capacity, v.overhead)
        except ValueError:  # flat: the peak does not grow here (the optimizer step's, say): look further
            guess = 4 * max(x1, x2)
        guess = min(max(guess, lo + 1), hi - 1)
        if guess in seen:  # no progress along the line: halve the interval
            guess = (lo + hi) // 2
        n = guess
    return lo, seen  # not reached for a peak that does not fall as n grows
