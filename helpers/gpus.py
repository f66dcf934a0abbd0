"""GPU cards, their memory, and the one rule for "does it fit?".

Every widget, the command line and every lesson judge a step by :func:`judge`:
the whole step's peak (through ``optimizer.step()``, in the steady state), plus
one stated overhead model, must not exceed the card's memory.  The overhead
model: an assumed CUDA context (:data:`CUDA_CONTEXT_BYTES`, 512 MiB), plus, when
the step is judged by its allocated peak, an assumed allowance for the caching
allocator's cache (:data:`CACHE_ALLOWANCE_BYTES`, 512 MiB; together
:data:`CUDA_OVERHEAD_BYTES`, 1 GiB); when it is judged by its reserved peak
(the allocator model replays it on the card), the replay replaces the
allowance.  :data:`BASIS` says which, in the words every verdict uses.

Beside the overhead, a verdict adds the memory that a real GPU allocates for
the step but that its traced tensors do not show, as named lines for the card
(:func:`unseen_lines`): the cuBLAS workspaces, computed from the card's compute
capability (:data:`COMPUTE_CAPABILITY`, :func:`cublas_workspace_bytes`) and the
number of threads that run matrix multiplications; and, for a step with
convolutions, the cuDNN workspaces, which are not modelled (their line has no
bytes, and the verdict says that its margin does not cover them).

All sizes are bytes; 1 MiB = 2**20 bytes.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from .units import cuda_size, fmt_bytes

#: ``total_memory`` of real cards, as ``torch.cuda.get_device_properties(0)``
#: printed it in public logs (its repr shows whole MiB; the figure moves by a
#: few tens of MiB with the driver and the ECC setting).  A card's nominal
#: "16 GB" is 16 GiB of memory chips, and the driver keeps part of it: PyTorch
#: sees 15.78 GiB on a "16 GB" V100, 79.19 GiB on an "80 GB" H100.
#: Sources: V100-SXM2-16GB, 16160 MiB (Ultralytics YOLOv5 setup logs);
#: RTX 4090, 24563 MiB, and H100 80GB HBM3, 81089 MiB (printed by
#: ``get_device_properties`` with torch 2.x, the latter in S. Bekman's
#: *Machine Learning Engineering* benchmarks); A100-SXM4-40GB, 40536 MiB
#: (``get_device_properties`` in the PaddlePaddle documentation, same CUDA
#: property); A100 80GB, 79.15 GiB (the "total capacity" of CUDA
#: out-of-memory messages on that card).
GPU_CARDS = {
    "V100 16 GB": 16160 * 2**20,
    "RTX 4090 24 GB": 24563 * 2**20,
    "A100 40 GB": 40536 * 2**20,
    "A100 80 GB": 81050 * 2**20,
    "H100 80 GB": 81089 * 2**20,
}

#: The compute capability ``(major, minor)`` of each card of :data:`GPU_CARDS`
#: (``torch.cuda.get_device_capability()``; NVIDIA's "CUDA GPUs" list: Volta
#: 7.0, Ampere A100 8.0, Ada RTX 4090 8.9, Hopper H100 9.0).  It decides the
#: default size of a cuBLAS workspace (:func:`cublas_workspace_bytes`).
COMPUTE_CAPABILITY = {
    "V100 16 GB": (7, 0),
    "RTX 4090 24 GB": (8, 9),
    "A100 40 GB": (8, 0),
    "A100 80 GB": (8, 0),
    "H100 80 GB": (9, 0),
}

#: The CUDA context, *assumed* (not measured here): memory a process holds on a
#: GPU outside PyTorch's caching allocator, with its kernels loaded lazily (the
#: default since PyTorch 1.13), and the library handles.  Published
#: measurements: 287,047,680 bytes (274 MiB) of device memory in use after one
#: small tensor, with lazy loading (pytorch/pytorch#86509, which made it the
#: default; 666 MB without it); "around 400MB" with CUDA >= 11.7
#: (pytorch/pytorch#109888); 426 MiB in nvidia-smi for PyTorch 2.10 with CUDA
#: 13.0 on an RTX 6000 Ada (unslothai/unsloth-zoo#1053).  512 MiB is a round
#: figure above them.  The cuBLAS workspaces, which a real caching allocator
#: holds beside the tensors, are not part of it: every verdict adds them as a
#: line of their own, for the card (:func:`unseen_lines`).
CUDA_CONTEXT_BYTES = 512 * 2**20

#: An allowance for the caching allocator's cache, *assumed* when its reserved
#: memory is not simulated: the free blocks it keeps, and their fragmentation,
#: above the peak of the tensors.  Under memory pressure the allocator frees
#: its cached blocks and retries before it reports an out-of-memory error
#: (``release_cached_blocks`` in c10/cuda/CUDACachingAllocator.cpp), so what a
#: step needs at a card's limit is far less than the cache it keeps when it has
#: room (replayed through :mod:`helpers.allocator`, the lessons' steps reserve
#: several hundred MiB to about 1.5 GiB above their allocated peak uncapped).
#: 512 MiB is a round figure; the allocator model (the "reserved" view of the
#: widgets, ``--reserved`` on the command line) replaces it with a replay of the
#: step on the card, which can need more (fragmentation) or less.
CACHE_ALLOWANCE_BYTES = 512 * 2**20

#: The assumed overhead of a step judged by its allocated peak:
#: :data:`CUDA_CONTEXT_BYTES` + :data:`CACHE_ALLOWANCE_BYTES` = 1 GiB.
CUDA_OVERHEAD_BYTES = CUDA_CONTEXT_BYTES + CACHE_ALLOWANCE_BYTES

#: A step that fits with less to spare than this fraction of the card's memory
#: fits *tightly* (:attr:`Verdict.tight`): too close to call.  The verdict counts
#: the traced tensors, the assumed overhead and the cuBLAS workspaces; it leaves
#: out the cuDNN workspaces (up to the largest free block, see
#: :func:`unseen_lines`), the allocator's fragmentation beyond the assumed cache
#: or the replay, memory held by other processes on the card, and the few
#: percent by which real-GPU peaks published for fully stated setups differ from
#: the simulation (lesson 09, ``benchmarks/published_figures.py``).  5% is a round figure above
#: that last error: 808 MiB of a V100's 16,160 MiB, 4 GiB of an H100's.
TIGHT_FRACTION = 0.05
#: Why a verdict is tight, in the words every verdict uses (:meth:`Verdict.sentence`).
TIGHT_REASON = ("not counted: cuDNN workspaces, fragmentation beyond the model, other processes, "
                "and the few percent by which real GPUs differ from the simulation")


#: The default cuBLAS workspace of PyTorch 2.14.1 on compute capability 9, 10
#: and 12 (Hopper, Blackwell): 32 MiB per handle and stream.
CUBLAS_WORKSPACE_HOPPER = 4096 * 8 * 1024
#: The default cuBLAS workspace on the other cards: ``:4096:2:16:8``, two
#: chunks of 4,096 KiB and eight of 16 KiB = 8,519,680 bytes.
CUBLAS_WORKSPACE_DEFAULT = 4096 * 1024 * 2 + 16 * 1024 * 8


def cublas_workspace_bytes(capability: tuple[int, int], config: str | None = None) -> int:
    """Bytes of one cuBLAS workspace (one per cuBLAS handle and CUDA stream) on a card.

    The rule of ``parseChosenWorkspaceSize`` in
    ``aten/src/ATen/cuda/CublasHandlePool.cpp`` (PyTorch 2.14.1): with
    ``CUBLAS_WORKSPACE_CONFIG`` unset, 32 MiB on compute capability 9, 10 or 12
    (:data:`CUBLAS_WORKSPACE_HOPPER`), else ``:4096:2:16:8`` =
    8,519,680 bytes (:data:`CUBLAS_WORKSPACE_DEFAULT`).  With it set, every
    ``:SIZE:COUNT`` pair the regular expression ``:([0-9]+):([0-9]+)`` finds
    adds ``SIZE`` KiB times ``COUNT``; a string with no such pair gives the
    default (PyTorch warns "Could not parse CUBLAS_WORKSPACE_CONFIG").  The
    workspace is allocated through the caching allocator at the first matrix
    multiplication of each handle and stream (``setWorkspaceForHandle``) and
    kept; cuBLASLt shares the workspace of the same handle and stream unless
    ``TORCH_CUBLASLT_UNIFIED_WORKSPACE=0`` (``getCUDABlasLtWorkspace``).

    Args:
        capability: ``(major, minor)``, as :data:`COMPUTE_CAPABILITY` gives it.
        config: the value of ``CUBLAS_WORKSPACE_CONFIG``, or None (unset).

    Raises:
        ValueError: for a capability that is not two integers >= 0.
    """
    if (not isinstance(capability, tuple) or len(capability) != 2
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in capability)):
        raise ValueError(f"capability must be (major, minor), two integers >= 0, got {capability!r}")
    default = CUBLAS_WORKSPACE_HOPPER if capability[0] in (9, 10, 12) else CUBLAS_WORKSPACE_DEFAULT
    if config is None:
        return default
    pairs = re.findall(r":([0-9]+):([0-9]+)", str(config))
    if not pairs:
        return default
    return sum(int(size) * 1024 * int(count) for size, count in pairs)


#: The names of the lines :func:`unseen_lines` gives, in order.
CUBLAS_LINE = "cuBLAS workspaces"
CUDNN_LINE = "cuDNN workspaces"
#: What a verdict says of a step with convolutions: its margin does not cover their workspaces.
CUDNN_NOTE = "cuDNN workspaces not modelled, not covered by the margin"


def unseen_lines(card: str, cublas_handles: int, convolutions: bool = False,
                 config: str | None = None) -> dict[str, int | None]:
    """What a real GPU allocates for a step that its traced tensors do not show, line by line.  Bytes.

    * ``"cuBLAS workspaces"``: ``cublas_handles`` x :func:`cublas_workspace_bytes`
      of the card.  cuBLAS handles belong to threads: a training step takes
      one on the Python thread (forward) and one on autograd's thread for the
      GPU (backward), a forward under ``torch.no_grad()`` only the first; a
      thread that runs no matrix multiplication takes none
      (:meth:`helpers.batch.Estimate.cublas_handles` counts them from the trace).
    * ``"cuDNN workspaces"`` (only with ``convolutions``): None, *not
      modelled*.  Their size depends on the algorithm cuDNN picks; PyTorch
      offers it any algorithm whose workspace fits the largest free block of
      the caching allocator (``cacheInfo`` in ``getMaxWorkspaceSize``,
      ``aten/src/ATen/native/cudnn/Conv_v7.cpp``, and
      ``get_available_workspace``, ``Conv_v8.cpp``), so no fixed bound applies.

    Args:
        card: a key of :data:`GPU_CARDS`.
        cublas_handles: 0, 1 or 2.
        convolutions: the step runs cuDNN convolutions.
        config: ``CUBLAS_WORKSPACE_CONFIG``, or None.

    Raises:
        ValueError: for an unknown card or a count outside 0-2.
    """
    if card not in COMPUTE_CAPABILITY:
        raise ValueError(f"unknown GPU {card!r}; use one of {', '.join(COMPUTE_CAPABILITY)}")
    if cublas_handles not in (0, 1, 2) or isinstance(cublas_handles, bool):
        raise ValueError(f"cublas_handles must be 0, 1 or 2, got {cublas_handles!r}")
    lines: dict[str, int | None] = {CUBLAS_LINE: cublas_handles * cublas_workspace_bytes(COMPUTE_CAPABILITY[card], config)}
    if convolutions:
        lines[CUDNN_LINE] = None
    return lines


def card_of(capacity: int) -> str | None:
    """The card of :data:`GPU_CARDS` whose memory is exactly ``capacity`` bytes, or None.

    A capacity taken from :data:`GPU_CARDS` is judged as that card, with its
    lines (:func:`unseen_lines`), whichever function judges it.
    """
    return next((card for card, nbytes in GPU_CARDS.items() if nbytes == capacity), None)


def headroom(capacity: int, overhead: int = CUDA_OVERHEAD_BYTES, *, cublas_handles: int = 2) -> int:
    """Bytes of tensors a GPU of ``capacity`` bytes can hold: ``capacity - overhead - workspaces``.

    The rule behind "does it fit" when a step is judged by its allocated peak
    (the simulated GPU's capacity, the largest batch, :func:`judge`): the
    tensors' peak must fit what the CUDA context, the allocator's cache and,
    on a card of :data:`GPU_CARDS` (:func:`card_of`), the cuBLAS workspaces of
    ``cublas_handles`` handles leave (a training step takes two: forward and
    backward run on two threads).

    Raises:
        ValueError: if ``capacity`` or ``overhead`` is negative, or for a
            handle count outside 0-2.
    """
    if capacity < 0 or overhead < 0:
        raise ValueError(f"capacity and overhead must be >= 0 bytes, got {capacity} and {overhead}")
    card = card_of(capacity)
    lines = unseen_lines(card, cublas_handles) if card is not None else {}
    return capacity - overhead - sum(n for n in lines.values() if n is not None)


def fits(peak: int, capacity: int, overhead: int = CUDA_OVERHEAD_BYTES, *, cublas_handles: int = 2) -> bool:
    """Whether a step whose tensors peak at ``peak`` bytes fits a GPU of ``capacity`` bytes.

    ``peak`` is the allocated peak of the *whole* step (through
    ``optimizer.step()``, in the steady state: ``profile_step(...,
    steady_state=True).peak_allocated_bytes``); with the default overhead this
    is :func:`judge`'s verdict on it, the cuBLAS workspaces of a card of
    :data:`GPU_CARDS` included (:func:`headroom`).
    """
    return peak <= headroom(capacity, overhead, cublas_handles=cublas_handles)


def _basis(unit: str) -> dict[str, str]:
    size = functools.partial(fmt_bytes, unit=unit, grouped=True)
    return {"allocated": f"peak allocated of the whole step + {size(CUDA_OVERHEAD_BYTES)} assumed overhead",
            "reserved": f"peak reserved of the whole step (simulated allocator) + {size(CUDA_CONTEXT_BYTES)} "
                        f"assumed CUDA context"}


#: What a verdict judged, in the same words everywhere (widgets, command line):
#: by the step's allocated peak, or by its reserved peak (the allocator model).
BASIS = _basis("MiB")


@dataclass(frozen=True)
class Verdict:
    """Whether a step fits a GPU, and on what it was judged.  Bytes.

    Attributes:
        fits: the answer.
        capacity: the GPU's memory.
        basis: ``"allocated"`` or ``"reserved"`` (a key of :data:`BASIS`).
        peak: the step's peak allocated bytes (basis ``"allocated"``) or peak
            reserved bytes (``"reserved"``); None when the allocator model ran
            out of memory before the step's end (then it does not fit).
        overhead: the assumed bytes added to ``peak``.
        lines: what the GPU adds that the traced tensors do not show, name ->
            bytes (:func:`unseen_lines`; None: not modelled); empty when the
            card is not known.
    """

    fits: bool
    capacity: int
    basis: str
    peak: int | None
    overhead: int
    lines: dict = field(default_factory=dict)

    @property
    def unseen(self) -> int:
        """The bytes of the modelled :attr:`lines` (the cuBLAS workspaces)."""
        return sum(n for n in self.lines.values() if n is not None)

    @property
    def need(self) -> int | None:
        """``peak + unseen + overhead``: what the card must hold (None if unknown)."""
        return None if self.peak is None else self.peak + self.unseen + self.overhead

    @property
    def judged(self) -> str:
        """What was judged, in words: :data:`BASIS` of :attr:`basis`."""
        return BASIS[self.basis]

    @property
    def spare(self) -> int | None:
        """``capacity - need``: what the card has left (negative: missing); None if unknown."""
        return None if self.need is None else self.capacity - self.need

    @property
    def tight(self) -> bool:
        """It fits, with less than :data:`TIGHT_FRACTION` of the card to spare: too close to call."""
        return self.fits and self.spare < TIGHT_FRACTION * self.capacity

    @property
    def answer(self) -> str:
        """``"fits"``, ``"fits, tight"`` or ``"does not fit"``: the verdict in two words."""
        return "does not fit" if not self.fits else "fits, tight" if self.tight else "fits"

    def tight_note(self, unit: str = "MiB") -> str:
        """For a :attr:`tight` verdict: how much is spare and why that is too little
        (:data:`TIGHT_REASON`); ``""`` otherwise.  ``unit``: ``"MiB"`` or ``"GiB"``."""
        if not self.tight:
            return ""
        size = fmt_bytes(self.spare, unit, grouped=True)
        return f"tight: {size} to spare, under {TIGHT_FRACTION:.0%} of the card; {TIGHT_REASON}"

    @property
    def caveat(self) -> str:
        """What the margin does not cover (:data:`CUDNN_NOTE` for a step with convolutions), or ``""``."""
        return CUDNN_NOTE if CUDNN_LINE in self.lines else ""

    def sentence(self, gpu: str, detail: str = "", unit: str = "MiB") -> str:
        """The verdict in words: ``"fits in <gpu>: <what was judged> + cuBLAS workspaces = <peak> +
        <overhead> + <workspaces> = <need> MiB <= <capacity> MiB"``, or ``"does not fit in <gpu>: ..."``;
        ``detail`` (say, why the allocator ran out of memory), :meth:`tight_note` and :attr:`caveat`, if any,
        follow in parentheses; a :attr:`tight` verdict begins ``"fits in <gpu>, tight: ..."``.

        Args:
            gpu: the GPU's name.
            detail: a reason, or ``""``.
            unit: ``"MiB"`` (as nvidia-smi writes a card's memory) or ``"GiB"``.

        Raises:
            ValueError: for another unit.
        """
        if unit not in ("MiB", "GiB"):
            raise ValueError(f"unit must be 'MiB' or 'GiB', got {unit!r}")
        scale = 2**20 if unit == "MiB" else 2**30
        verb = "fits" if self.fits else "does not fit"
        tight = ", tight" if self.tight else ""
        notes = "; ".join(filter(None, [detail, self.tight_note(unit), self.caveat]))
        more = f" ({notes})" if notes else ""
        judged = _basis(unit)[self.basis]
        named = [(name, n) for name, n in self.lines.items() if n]
        judged += "".join(f" + {name}" for name, _ in named)
        if self.peak is None:
            return f"{verb} in {gpu}: {judged}: the simulated allocator ran out of memory{more}"
        size = functools.partial(fmt_bytes, unit=unit, grouped=True)
        terms = " + ".join([f"{self.peak / scale:,.1f}", f"{self.overhead / scale:,.1f}",
                            *(f"{n / scale:,.{1 if n >= scale / 10 else 2}f}" for _, n in named)])  # 16 MiB: 0.02 GiB
        return (f"{verb} in {gpu}{tight}: {judged} = {terms} = "
                f"{size(self.need)} {'<=' if self.fits else '>'} {size(self.capacity)}{more}")


def judge(capacity: int, peak_allocated: int | None = None, *, peak_reserved: int | None = None,
          reserved: bool = False, card: str | None = None, cublas_handles: int = 2,
          convolutions: bool = False) -> Verdict:
    """The one rule for "does this training step fit this GPU?".

    Two bases, one overhead model, plus what the card adds:

    * by the allocated peak (``reserved=False``): ``peak_allocated`` +
      :data:`CUDA_OVERHEAD_BYTES` (the assumed CUDA context and allocator
      cache) + the card's lines <= ``capacity``;
    * by the reserved peak (``reserved=True``), the step replayed through the
      caching-allocator model on this card (``helpers.allocator.replay_on_gpu``,
      which leaves :data:`CUDA_CONTEXT_BYTES` to the context): ``peak_reserved``
      + :data:`CUDA_CONTEXT_BYTES` + the card's lines <= ``capacity``;
      ``peak_reserved`` None means that the replay ran out of memory: it does
      not fit.  The cuBLAS workspaces are added beside the replayed peak, not
      replayed (on a GPU each is a block of its own, allocated at the first
      matrix multiplication of its thread and kept).

    The card's lines (:func:`unseen_lines`, given ``card``): the cuBLAS
    workspaces of ``cublas_handles`` handles, and for a step with
    ``convolutions`` the cuDNN workspaces, not modelled (the verdict says so,
    :attr:`Verdict.caveat`).  Without ``card``, a capacity of :data:`GPU_CARDS`
    is that card (:func:`card_of`); any other capacity has no lines.

    The peak is the whole step's, through ``optimizer.step()``, in the steady
    state (the optimizer's states exist): what every step of a training loop needs.

    Args:
        capacity: the GPU's memory in bytes (:data:`GPU_CARDS`).
        peak_allocated: the step's peak allocated bytes (basis "allocated").
        peak_reserved: the replay's peak reserved bytes (basis "reserved").
        reserved: which basis.
        card: the card's name, a key of :data:`GPU_CARDS`, or None.
        cublas_handles: how many cuBLAS handles the step takes (0, 1 or 2).
        convolutions: the step runs convolutions (cuDNN).

    Raises:
        ValueError: for a negative capacity or peak, a missing allocated peak,
            an unknown card or a handle count outside 0-2.
    """
    if capacity < 0:
        raise ValueError(f"capacity must be >= 0 bytes, got {capacity}")
    if reserved:
        peak, overhead = peak_reserved, CUDA_CONTEXT_BYTES
    else:
        if peak_allocated is None:
            raise ValueError("judging by the allocated peak needs peak_allocated")
        peak, overhead = peak_allocated, CUDA_OVERHEAD_BYTES
    if peak is not None and peak < 0:
        raise ValueError(f"a peak must be >= 0 bytes, got {peak}")
    card = card_of(capacity) if card is None else card
    lines = unseen_lines(card, cublas_handles, convolutions) if card is not None else {}
    unseen = sum(n for n in lines.values() if n is not None)
    ok = peak is not None and peak + unseen + overhead <= capacity
    return Verdict(ok, capacity, "reserved" if reserved else "allocated", peak, overhead, lines)


def oom_message(requested: int, capacity: int, in_use: int, allocated: int, reserved: int,
                simulated: bool = True, allowed: int | None = None, free: int | None = None) -> str:
    """The first line of a CUDA out-of-memory error, field by field.

    Shaped like the message of ``torch.OutOfMemoryError`` in PyTorch 2.x
    (``DeviceCachingAllocator::malloc`` in c10/cuda/CUDACachingAllocator.cpp),
    without its closing advice, so that a learner can read a real one.

    Args:
        requested: bytes the failing allocation asked for ("Tried to allocate");
            pass :func:`allocation_size` of the request, as PyTorch reports it.
        capacity: total memory of the GPU ("total capacity").
        in_use: memory the process holds on the GPU, tensors, cache and CUDA
            context together.
        allocated: bytes in live tensors ("allocated by PyTorch").
        reserved: bytes the caching allocator holds from the driver, >= ``allocated``.
        simulated: say at the start that no GPU ran out.
        allowed: the cap set with ``torch.cuda.set_per_process_memory_fraction``
            ("... allowed;"), or ``None`` when no cap is set.
        free: what the driver reports free ("of which ... is free"); default
            ``capacity - in_use`` (no other process on the GPU).
    """
    prefix = "Simulated CUDA out of memory" if simulated else "CUDA out of memory"
    free = max(capacity - in_use, 0) if free is None else free
    cap = f"{cuda_size(allowed)} allowed; " if allowed is not None else ""
    return (
        f"{prefix}. Tried to allocate {cuda_size(requested)}. GPU 0 has a total capacity of "
        f"{cuda_size(capacity)} of which {cuda_size(free)} is free. "
        f"Including non-PyTorch memory, this process has {cuda_size(in_use)} memory in use. {cap}"
        f"Of the allocated memory {cuda_size(allocated)} is allocated by PyTorch, and "
        f"{cuda_size(reserved - allocated)} is reserved by PyTorch but unallocated."
    )
