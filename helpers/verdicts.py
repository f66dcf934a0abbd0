"""Does a profiled step fit a GPU: the estimate a trace gives (:class:`Estimate`) and its verdict on every card
(:func:`card_verdicts`), the rule of the command line, the pre-flight check and every widget.

No torch import: the command line's cold answer (:mod:`helpers.cli_cold`) judges a profile read from a log on disk
with it.  :mod:`helpers.batch` builds the searches on it (and re-exports its names).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from .gpus import GPU_CARDS, Verdict, judge
from .record import StepProfile


#: Module types whose forward and backward run cuBLAS matmuls on CUDA (``addmm``/``mm``/``bmm``): every type named
#: ``...Linear`` (LoRA's too), ``nn.Bilinear``, ``nn.MultiheadAttention`` and Hugging Face's ``Conv1D`` (linear).
MATMUL_MODULES = re.compile(r"(Linear|Bilinear|MultiheadAttention|Conv1D)$")
#: Module types that run cuDNN convolutions on CUDA (``nn.Conv1d`` ... ``nn.ConvTranspose3d``).
CONV_MODULES = re.compile(r"^(Lazy)?Conv(Transpose)?[123]d$")


def cublas_handles(profile: StepProfile) -> int:
    """How many cuBLAS handles (so workspaces) ``profile``'s step takes on a GPU: 0, 1 or 2.

    Handles belong to threads (``getCurrentCUDABlasHandle``, ``aten/src/ATen/cuda/CublasHandlePool.cpp``): forward runs
    on the Python thread, backward on autograd's; each takes one at its first matmul, seen in the trace as a forward
    event, and a backward or recomputation event, of a :data:`MATMUL_MODULES` module (a bare ``torch.matmul`` is not).
    """
    def ran(phases) -> bool:
        return any(e.phase in phases and e.module_type and MATMUL_MODULES.search(e.module_type)
                   for e in profile.events)

    return int(ran(("fwd",))) + int(ran(("bwd", "recompute")))


def has_convolutions(profile: StepProfile) -> bool:
    """Whether ``profile``'s step runs cuDNN convolutions on a GPU (a module of :data:`CONV_MODULES`)."""
    return any(e.module_type and CONV_MODULES.match(e.module_type) for e in profile.events)


@dataclass(frozen=True)
class Estimate:
    """The peak of one training step at one batch size.  Bytes.

    Attributes:
        peak_bytes: peak allocated bytes (None if it did not fit a real GPU).
        categories: bytes by category at the peak (:data:`helpers.record.CATEGORIES`).
        where: the peak's event in words (:attr:`helpers.engine.trace.Event.label`).
        traced: traced directly (False: interpolated).
        backend: ``"cuda"``, ``"simulated"``, or ``"formula"`` (:func:`model_state_estimate`).
        error: the out-of-memory message when a real GPU could not run it.
        reserved_bytes: the allocator model's peak reserved on the chosen GPU (:func:`reserved_estimate`), or None.
        allocator_error: why the allocator model ran out of memory, if it did.
        paged_bytes: a paged optimizer's states in unified memory, outside ``peak_bytes``
            (:attr:`helpers.record.StepProfile.paged_bytes`).
        cublas_handles, convolutions: the step's, as :func:`cublas_handles` and :func:`has_convolutions` count them.
        workspaces, cudnn_bound: the step's ``config.workspaces`` and
            :attr:`helpers.record.StepProfile.cudnn_bound_bytes` (the verdict states them).
    """

    batch_size: int
    peak_bytes: int | None
    categories: dict[str, int] = field(default_factory=dict)
    where: str = ""
    traced: bool = True
    backend: str = "simulated"
    error: str | None = None
    reserved_bytes: int | None = None
    allocator_error: str | None = None
    cublas_handles: int = 2
    convolutions: bool = False
    paged_bytes: int = 0
    workspaces: str = "none"
    cudnn_bound: int | None = None

    @classmethod
    def of(cls, profile: StepProfile) -> "Estimate":
        """The estimate a direct trace gives: its peak, categories and where, and the libraries it calls."""
        return cls(profile.batch_size, profile.peak_allocated_bytes, dict(profile.categories), profile.peak.label,
                   True, profile.backend, cublas_handles=cublas_handles(profile),
                   convolutions=has_convolutions(profile), paged_bytes=profile.paged_bytes,
                   workspaces=profile.config.workspaces, cudnn_bound=profile.cudnn_bound_bytes)

    @property
    def by_reserved(self) -> bool:
        """True when the step was replayed through the allocator model (:func:`reserved_estimate`)."""
        return self.reserved_bytes is not None or self.allocator_error is not None

    def verdict(self, capacity: int, card: str | None = None) -> Verdict:
        """Does it fit a GPU of ``capacity`` bytes: :func:`helpers.gpus.judge` of this estimate, by the reserved peak
        when there is one, else the allocated peak; a ``card`` of :data:`helpers.gpus.GPU_CARDS` adds its lines.

        Raises:
            ValueError: when a real GPU ran out of memory, or for an unknown card.
        """
        if self.peak_bytes is None:
            raise ValueError(f"batch {self.batch_size} ran out of memory: there is no peak to judge")
        return judge(capacity, self.peak_bytes, peak_reserved=self.reserved_bytes, reserved=self.by_reserved,
                     card=card, cublas_handles=self.cublas_handles, convolutions=self.convolutions,
                     workspaces=self.workspaces, cudnn_bound=self.cudnn_bound)


def reserved_estimate(profile: StepProfile, capacity: int, settings=None) -> Estimate:
    """``profile``'s step (a direct trace) replayed through the allocator model on a GPU of ``capacity`` bytes
    (:func:`helpers.allocator.replay_on_gpu`): the peak reserved bytes, or ``allocator_error`` if it ran out of memory.
    ``settings``: :class:`helpers.allocator.AllocatorSettings` or ``PYTORCH_CUDA_ALLOC_CONF`` string (None: PyTorch's).

    Raises:
        ValueError: for a capacity that leaves nothing beside the CUDA context, or bad settings.
    """
    from .allocator import replay_on_gpu
    from .units import fmt_mib

    run = replay_on_gpu(profile.allocation_log, capacity, settings)
    error = None
    if run.error is not None:
        e = run.error
        error = (f"tried to allocate {fmt_mib(e.requested)} with {fmt_mib(e.allocated)} allocated, "
                 f"{fmt_mib(e.reserved)} reserved, largest free block {fmt_mib(e.largest_free)}")
        # the room it had (the card less the assumed CUDA context) is the verdict's to say (Verdict.sentence)
    return dataclasses.replace(Estimate.of(profile), reserved_bytes=None if error else run.peak_reserved,
                               allocator_error=error)


def card_verdicts(profile, reserved: bool = False, settings=None) -> dict:
    """Does ``profile``'s step fit each card of :data:`helpers.gpus.GPU_CARDS` (the command line's and pre-flight
    check's verdict): card name -> :class:`helpers.gpus.Verdict`, in the order of ``GPU_CARDS``.

    The rule of every widget (:meth:`Estimate.verdict`), by the allocated peak, or with ``reserved`` by the allocator
    model with ``settings`` (:func:`reserved_estimate`).  On a first step (not ``steady_state``) it is a lower bound."""
    if reserved:
        return {card: reserved_estimate(profile, capacity, settings).verdict(capacity, card)
                for card, capacity in GPU_CARDS.items()}
    estimate = Estimate.of(profile)
    return {card: estimate.verdict(capacity, card) for card, capacity in GPU_CARDS.items()}
