"""GPU cards, their memory, and the one rule for "does it fit?" (:func:`judge`).

Every widget, the command line and every lesson judge the whole step's peak (through ``optimizer.step()``, steady
state) plus one stated overhead: the assumed CUDA context (:data:`CUDA_CONTEXT_BYTES`), and, when judged by the
allocated peak, an assumed cache allowance (:data:`CACHE_ALLOWANCE_BYTES`), which a replay of the allocator model
replaces when judged by the reserved peak (:data:`BASIS`).  A verdict also adds, as named lines for the card, what a GPU
allocates that the traced tensors do not show (:func:`unseen_lines`).  All sizes are bytes.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import NamedTuple

from .units import cuda_size, fmt_bytes

#: ``total_memory`` of real cards, as ``torch.cuda.get_device_properties(0)`` printed it in public logs (whole MiB; it
#: moves a few tens of MiB with the driver and ECC): V100-SXM2-16GB, 16160 MiB (Ultralytics YOLOv5 setup logs); RTX
#: 4090, 24563 MiB, and H100 80GB HBM3, 81089 MiB (torch 2.x, the latter in S. Bekman's *Machine Learning Engineering*
#: benchmarks); A100-SXM4-40GB, 40536 MiB (the PaddlePaddle documentation); A100 80GB, 79.15 GiB (the "total
#: capacity" of CUDA out-of-memory messages on that card).
GPU_CARDS = {
    "V100 16 GB": 16160 * 2**20,
    "RTX 4090 24 GB": 24563 * 2**20,
    "A100 40 GB": 40536 * 2**20,
    "A100 80 GB": 81050 * 2**20,
    "H100 80 GB": 81089 * 2**20,
}
#: A 48 GB card: the ``total_memory`` that ``torch.cuda.get_device_properties`` printed for an NVIDIA RTX A6000,
#: 48676 MiB (pytorch/ao, ``torchao/prototype/hqq/README.md``, "GPU details").  Not in ``GPU_CARDS`` (no verdict or menu
#: lists it): lessons 09 and 10 name it, and a step judged on it is judged as a bare capacity, without a cuBLAS
#: workspace line (about 16 MiB on that card); vLLM's account finds its SM count by this total
#: (:func:`helpers.serving.sm_count`).
CARD_48GB = {"RTX A6000 48 GB": 48676 * 2**20}

class GpuSpec(NamedTuple):
    """What the simulated GPU's kernel rules need of a card: ``sms`` and ``threads_per_sm``
    (``multiProcessorCount``, ``maxThreadsPerMultiProcessor`` of ``torch.cuda.get_device_properties``), and its
    ``capability`` (``(major, minor)``)."""

    sms: int
    threads_per_sm: int
    capability: tuple[int, int]


#: What a reduction kernel's launch depends on, per card (:func:`helpers.engine.workspaces.reduction_staging`), and
#: the compute capability (:data:`COMPUTE_CAPABILITY` for the cards of :data:`GPU_CARDS`).  The H200: 132 and
#: 2,048, measured (``make gpu-reference``'s machine, torch 2.11); SM counts from NVIDIA's architecture whitepapers
#: (V100 SXM2: 80; A100: 108; H100 SXM5: 132; RTX 4090, AD102 as shipped: 128; RTX A6000, GA102 as shipped: 84, its
#: 10,752 CUDA cores at 128 a streaming multiprocessor); threads per SM from the CUDA C++ Programming Guide's table of
#: compute capabilities (2,048 on 7.0, 8.0 and 9.0; 1,536 on 8.6 and 8.9).  The H200 and the A6000 are not cards of
#: :data:`GPU_CARDS` (no verdict is given for them): the H200 is the card the simulation claims to be
#: (:data:`SIMULATED_GPU`), the A6000 the 48 GB card of :data:`CARD_48GB`.
GPU_SPECS = {
    "V100 16 GB": GpuSpec(80, 2048, (7, 0)),
    "RTX 4090 24 GB": GpuSpec(128, 1536, (8, 9)),
    "A100 40 GB": GpuSpec(108, 2048, (8, 0)),
    "A100 80 GB": GpuSpec(108, 2048, (8, 0)),
    "H100 80 GB": GpuSpec(132, 2048, (9, 0)),
    "H200 141 GB": GpuSpec(132, 2048, (9, 0)),
    "RTX A6000 48 GB": GpuSpec(84, 1536, (8, 6)),
}

#: The card the simulated GPU claims to be when its memory names no card of :data:`GPU_CARDS`: the NVIDIA H200 on
#: which the course's GPU reference (``lessons/data/gpu_reference.json``) and its cuDNN table were recorded.
SIMULATED_GPU = "H200 141 GB"


def device_card(device_name: str) -> str | None:
    """The card of :data:`GPU_SPECS` that ``torch.cuda.get_device_name()`` names (``"NVIDIA H200"``: the H200), or
    None where none or several match (an A100's name does not say its memory)."""
    found = [card for card in GPU_SPECS if card.rsplit(" ", 2)[0] in device_name]
    return found[0] if len(found) == 1 else None


def simulated_card(capacity: int | None = None) -> str:
    """The card a simulated GPU of ``capacity`` bytes is: the card of :data:`GPU_CARDS` with exactly that memory
    (:func:`card_of`), else :data:`SIMULATED_GPU`."""
    return (card_of(capacity) if capacity is not None else None) or SIMULATED_GPU


#: The compute capability ``(major, minor)`` of each card (``torch.cuda.get_device_capability()``; NVIDIA's "CUDA GPUs"
#: list): it decides the default size of a cuBLAS workspace (:func:`cublas_workspace_bytes`).
COMPUTE_CAPABILITY = {
    "V100 16 GB": (7, 0),
    "RTX 4090 24 GB": (8, 9),
    "A100 40 GB": (8, 0),
    "A100 80 GB": (8, 0),
    "H100 80 GB": (9, 0),
}

#: The CUDA context, *assumed*: memory a process holds on a GPU outside the caching allocator, kernels loaded lazily
#: (default since PyTorch 1.13).  Published measurements: 287,047,680 bytes (274 MiB) in use after one small tensor,
#: with lazy loading (pytorch/pytorch#86509, which made it the default; 666 MB without it); "around 400MB" with CUDA
#: >= 11.7 (pytorch/pytorch#109888); 426 MiB in nvidia-smi for PyTorch 2.10 with CUDA 13.0 on an RTX 6000 Ada
#: (unslothai/unsloth-zoo#1053).  512 MiB is a round figure above them; cuBLAS workspaces are not part of it.
CUDA_CONTEXT_BYTES = 512 * 2**20

#: An allowance for the caching allocator's cache and fragmentation above the tensors' peak, *assumed* when reserved
#: memory is not simulated.  At a card's limit the allocator frees its cache and retries before it fails
#: (``release_cached_blocks``, c10/cuda/CUDACachingAllocator.cpp), so a step needs far less than the cache it keeps
#: when it has room.  512 MiB is a round figure; judging by reserved memory replaces it with a replay on the card.
CACHE_ALLOWANCE_BYTES = 512 * 2**20

#: The assumed overhead of a step judged by its allocated peak: context + cache allowance = 1 GiB.
CUDA_OVERHEAD_BYTES = CUDA_CONTEXT_BYTES + CACHE_ALLOWANCE_BYTES

#: A step that fits with less to spare than this fraction of the card's memory fits *tightly* (:attr:`Verdict.tight`):
#: too close to call, for what the verdict leaves out (:data:`TIGHT_REASON`) and the few percent by which published
#: real-GPU peaks differ from the simulation (``benchmarks/published_figures.py``).  5% is a round figure above that.
TIGHT_FRACTION = 0.05
#: Why a verdict is tight, in the words every verdict uses (:meth:`Verdict.sentence`).
TIGHT_REASON = ("not counted: cuDNN workspaces, fragmentation beyond the model, other processes, "
                "and the few percent by which real GPUs differ from the simulation")


#: The default cuBLAS workspace of the pinned PyTorch on compute capability 9, 10 and 12 (Hopper, Blackwell): 32 MiB.
CUBLAS_WORKSPACE_HOPPER = 4096 * 8 * 1024
#: The default on the other cards, ``:4096:2:16:8``: two chunks of 4,096 KiB and eight of 16 KiB = 8,519,680 bytes.
CUBLAS_WORKSPACE_DEFAULT = 4096 * 1024 * 2 + 16 * 1024 * 8


def cublas_workspace_bytes(capability: tuple[int, int], config: str | None = None) -> int:
    """Bytes of one cuBLAS workspace (one per handle and CUDA stream) on a card of ``capability`` (``(major, minor)``,
    :data:`COMPUTE_CAPABILITY`), with ``CUBLAS_WORKSPACE_CONFIG`` set to ``config`` (None: unset).

    ``parseChosenWorkspaceSize`` in ``aten/src/ATen/cuda/CublasHandlePool.cpp`` (the pinned PyTorch,
    :data:`helpers.versions.TORCH`): unset, :data:`CUBLAS_WORKSPACE_HOPPER` on compute capability 9, 10 or 12, else
    :data:`CUBLAS_WORKSPACE_DEFAULT`; set, every ``:SIZE:COUNT`` pair (``:([0-9]+):([0-9]+)``) adds ``SIZE`` KiB x
    ``COUNT`` (no pair: the default).  Allocated through the caching allocator at the first matmul of each handle and
    stream (``setWorkspaceForHandle``) and kept; cuBLASLt shares it (``getCUDABlasLtWorkspace``).

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
    return sum(int(size) * 1024 * int(count) for size, count in pairs) if pairs else default


#: The names of the lines :func:`unseen_lines` gives, in order.
CUBLAS_LINE = "cuBLAS workspaces"
CUDNN_LINE = "cuDNN workspaces"
#: What a verdict says of a step with convolutions: its margin does not cover their workspaces.
CUDNN_NOTE = "cuDNN workspaces not modelled, not covered by the margin"
#: The bound on one cuDNN workspace (:attr:`helpers.engine.workspaces.ConvPass.bound`), as a multiple of its convolution's input + weight + output bytes: every workspace of
#: the H200 table (66 isolated convolutions, 181 workspaces, cuDNN 9.14, float32 and float16, TF32 on,
#: ``benchmark=False``) is at most 1.5114 times them (ResNet18's ``layer4.0.conv1`` forward, batch 32, float32), so
#: 1.52.  Derived from that one card and those settings: with TF32 off for cuDNN the same convolutions took up to 21.8
#: times, and ``cudnn.benchmark=True`` tries algorithms with workspaces of gigabytes; the bound is stated, not proven.
CUDNN_BOUND_RATIO = 1.52


def cudnn_note(workspaces: str = "none", bound: int | None = None, unit: str = "MiB", fits: bool | None = None) -> str:
    """What a verdict says of a step with convolutions, by how the simulation counted their cuDNN workspaces
    (``workspaces``, :data:`helpers.config.WORKSPACES`): not counted, with ``bound`` (bytes; None: unknown) the most
    they may add; counted as measured; or counted at their bound.

    The bound's words follow the verdict they qualify: ``fits=True`` "but cuDNN may need up to N MiB more" (it may
    not fit after all), ``fits=False`` "and cuDNN may need up to N MiB more" (it is further over), ``None`` (a line of
    its own, as the command line's) "cuDNN may need up to N MiB more"."""
    if workspaces == "measured":
        return "cuDNN workspaces counted, as measured on an H200 (the only card with a table)"
    if workspaces == "bound":
        return f"cuDNN workspaces counted at their bound, {CUDNN_BOUND_RATIO} x each convolution's tensors"
    if bound is None:
        return CUDNN_NOTE
    opening = {True: "but ", False: "and ", None: ""}[fits]
    return (f"{opening}cuDNN may need up to {fmt_bytes(bound, unit, grouped=True)} more: its workspaces are not "
            f"counted, each at most {CUDNN_BOUND_RATIO} x its convolution's input + weight + output (measured on an "
            f"H200)")


def unseen_lines(card: str, cublas_handles: int, convolutions: bool = False,
                 config: str | None = None) -> dict[str, int | None]:
    """What a real GPU allocates for a step that its traced tensors do not show, line by line.  Bytes.

    * ``"cuBLAS workspaces"``: ``cublas_handles`` x :func:`cublas_workspace_bytes` (a training step takes two: the
      forward's thread and autograd's; :func:`helpers.batch.cublas_handles` counts them from the trace).
    * ``"cuDNN workspaces"`` (with ``convolutions``): None, *not modelled*: cuDNN may take any algorithm whose workspace
      fits the allocator's largest free block (``getMaxWorkspaceSize``, ``aten/src/ATen/native/cudnn/Conv_v7.cpp``;
      ``get_available_workspace``, ``Conv_v8.cpp``), so no fixed bound applies.

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
    """The card of :data:`GPU_CARDS` whose memory is exactly ``capacity`` bytes (judged as that card, with its lines), or None."""
    return next((card for card, nbytes in GPU_CARDS.items() if nbytes == capacity), None)


def headroom(capacity: int, overhead: int = CUDA_OVERHEAD_BYTES, *, cublas_handles: int = 2) -> int:
    """Bytes of tensors a GPU of ``capacity`` bytes can hold: ``capacity - overhead - workspaces``, the workspaces of
    ``cublas_handles`` handles on a card of :data:`GPU_CARDS` (:func:`card_of`); :func:`judge`'s allocated-peak rule.

    Raises:
        ValueError: for a negative ``capacity`` or ``overhead``, or a handle count outside 0-2.
    """
    if capacity < 0 or overhead < 0:
        raise ValueError(f"capacity and overhead must be >= 0 bytes, got {capacity} and {overhead}")
    card = card_of(capacity)
    lines = unseen_lines(card, cublas_handles) if card is not None else {}
    return capacity - overhead - sum(n for n in lines.values() if n is not None)


def fits(peak: int, capacity: int, overhead: int = CUDA_OVERHEAD_BYTES, *, cublas_handles: int = 2) -> bool:
    """Whether a step whose tensors peak at ``peak`` bytes (the whole step's allocated peak, steady state) fits a GPU of
    ``capacity`` bytes; with the default overhead, :func:`judge`'s verdict."""
    return peak <= headroom(capacity, overhead, cublas_handles=cublas_handles)


def _basis(unit: str) -> dict[str, str]:
    size = functools.partial(fmt_bytes, unit=unit, grouped=True)
    return {"allocated": f"peak allocated of the whole step + {size(CUDA_OVERHEAD_BYTES)} assumed overhead",
            "reserved": f"peak reserved of the whole step (simulated allocator) + {size(CUDA_CONTEXT_BYTES)} "
                        f"assumed CUDA context"}


#: What a verdict judged, in the same words everywhere: the allocated peak, or the reserved peak (the allocator model).
BASIS = _basis("MiB")


@dataclass(frozen=True)
class Verdict:
    """Whether a step fits a GPU, and on what it was judged.  Bytes.

    Attributes:
        capacity, overhead: the GPU's memory; the assumed bytes added to ``peak``.
        basis: ``"allocated"`` or ``"reserved"`` (a key of :data:`BASIS`).
        peak: the step's peak allocated or reserved bytes; None when the allocator model ran out of memory (no fit).
        lines: name -> bytes of :func:`unseen_lines` (None: not modelled); empty for an unknown card.
        workspaces, cudnn_bound: how the simulated peak counted cuDNN's workspaces (:data:`helpers.config.WORKSPACES`)
            and, uncounted, the most they may add (bytes; None: unknown): :attr:`caveat` states them.
    """

    fits: bool
    capacity: int
    basis: str
    peak: int | None
    overhead: int
    lines: dict = field(default_factory=dict)
    workspaces: str = "none"
    cudnn_bound: int | None = None

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
        """For a step with convolutions, how their cuDNN workspaces were counted, or what they may add, worded for this
        verdict ("but ..." when it fits, "and ..." when it does not; :func:`cudnn_note`, in MiB); ``""`` otherwise."""
        return cudnn_note(self.workspaces, self.cudnn_bound, fits=self.fits) if CUDNN_LINE in self.lines else ""

    def sentence(self, gpu: str, detail: str = "", unit: str = "MiB") -> str:
        """The verdict in words: ``"fits in <gpu>: <what was judged> + cuBLAS workspaces = <peak> + <overhead> +
        <workspaces> = <need> MiB <= <capacity> MiB"`` (``"fits in <gpu>, tight:"``, ``"does not fit in <gpu>:"``),
        then ``detail``, :meth:`tight_note` and :attr:`caveat` in parentheses, if any.  When the allocator model ran out
        of memory (no peak): the room it had, ``"within <capacity> - <context> = <room> MiB"``, and the workspaces
        still to come, ``"before the <workspaces> MiB of cuBLAS workspaces"``.

        Raises:
            ValueError: for a ``unit`` other than ``"MiB"`` or ``"GiB"``.
        """
        if unit not in ("MiB", "GiB"):
            raise ValueError(f"unit must be 'MiB' or 'GiB', got {unit!r}")
        scale = 2**20 if unit == "MiB" else 2**30
        verb = "fits" if self.fits else "does not fit"
        tight = ", tight" if self.tight else ""
        caveat = cudnn_note(self.workspaces, self.cudnn_bound, unit, self.fits) if CUDNN_LINE in self.lines else ""
        notes = "; ".join(filter(None, [detail, self.tight_note(unit), caveat]))
        more = f" ({notes})" if notes else ""
        judged = _basis(unit)[self.basis]
        named = [(name, n) for name, n in self.lines.items() if n]
        judged += "".join(f" + {name}" for name, _ in named)
        size = functools.partial(fmt_bytes, unit=unit, grouped=True)
        number = lambda n: f"{n / scale:,.{1 if n >= scale / 10 else 2}f}"  # noqa: E731  16 MiB: 0.02 GiB
        if self.peak is None:  # the replay's room (helpers.allocator.replay_on_gpu): the card less the CUDA context
            room = (f"within {self.capacity / scale:,.1f} - {self.overhead / scale:,.1f} = "
                    f"{size(self.capacity - self.overhead)}")
            before = " + ".join(f"{number(n)} {unit} of {name}" for name, n in named)
            return (f"{verb} in {gpu}: {judged}: the simulated allocator ran out of memory {room}"
                    f"{f', before the {before}' if before else ''}{more}")
        terms = " + ".join([f"{self.peak / scale:,.1f}", f"{self.overhead / scale:,.1f}",
                            *(number(n) for _, n in named)])
        return (f"{verb} in {gpu}{tight}: {judged} = {terms} = "
                f"{size(self.need)} {'<=' if self.fits else '>'} {size(self.capacity)}{more}")


def judge(capacity: int, peak_allocated: int | None = None, *, peak_reserved: int | None = None,
          reserved: bool = False, card: str | None = None, cublas_handles: int = 2,
          convolutions: bool = False, workspaces: str = "none", cudnn_bound: int | None = None) -> Verdict:
    """The one rule for "does this training step fit this GPU?", on the whole step's peak in the steady state.  Bytes.

    * by the allocated peak: ``peak_allocated`` + :data:`CUDA_OVERHEAD_BYTES` + the card's lines <= ``capacity``;
    * by the reserved peak (``reserved=True``; the allocator model replayed on the card,
      :func:`helpers.allocator.replay_on_gpu`): ``peak_reserved`` + :data:`CUDA_CONTEXT_BYTES` + the card's lines <=
      ``capacity``; a ``peak_reserved`` of None (the replay ran out of memory) does not fit.

    The card's lines are :func:`unseen_lines` of ``card`` (default: the card of :data:`GPU_CARDS` with this capacity;
    none for another capacity), with ``cublas_handles`` (0, 1 or 2) and ``convolutions`` (cuDNN's); ``workspaces`` and
    ``cudnn_bound``: how the peak counted cuDNN's workspaces, and the most they may add uncounted (:func:`cudnn_note`).

    Raises:
        ValueError: for a negative capacity or peak, no allocated peak, an unknown card, or handles outside 0-2.
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
    return Verdict(ok, capacity, "reserved" if reserved else "allocated", peak, overhead, lines, workspaces, cudnn_bound)


def oom_message(requested: int, capacity: int, in_use: int, allocated: int, reserved: int,
                simulated: bool = True, allowed: int | None = None, free: int | None = None) -> str:
    """The first line of a CUDA out-of-memory error, field by field: ``torch.OutOfMemoryError``'s message
    (``DeviceCachingAllocator::malloc``, ``c10/cuda/CUDACachingAllocator.cpp``) without its closing advice.

    Args:
        requested: bytes asked for ("Tried to allocate"): :func:`allocation_size` of the request.
        capacity, in_use: the GPU's total memory ("total capacity"); what the process holds (tensors, cache, context).
        allocated, reserved: bytes in live tensors ("allocated by PyTorch"); held by the caching allocator (>= that).
        simulated: say at the start that no GPU ran out.
        allowed, free: the ``set_per_process_memory_fraction`` cap, or ``None``; what the driver reports free (default
            ``capacity - in_use``).
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
