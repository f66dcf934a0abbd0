"""The allocator's options, as ``PYTORCH_CUDA_ALLOC_CONF`` spells them (:class:`AllocatorSettings`; bytes unless the
name says MiB), each read as ``c10::CachingAllocator::AcceleratorAllocatorConfig`` and ``CUDAAllocatorConfig`` read
it (``c10/core/AllocatorConfig.cpp``, ``c10/cuda/CUDAAllocatorConfig.cpp``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import check_int
from ..units import MiB
from .rules import K_LARGE_BUFFER

#: Options the pinned PyTorch accepts in ``PYTORCH_CUDA_ALLOC_CONF`` that this model does not model, with the reason
#: (the keys ``AcceleratorAllocatorConfig`` and ``CUDAAllocatorConfig`` register in ``libc10.so``/``libc10_cuda.so``).
_REFUSED_OPTIONS = {
    "garbage_collection_threshold": "it frees cached blocks by age, only under a memory fraction",
    "large_segment_size_mb": "it changes the 20 MiB segment of 1-10 MiB requests",
    "throw_on_cudamalloc_oom": "it changes when cudaMalloc is tried",
    "release_lock_on_cudamalloc": "it changes locking, which a one-stream model has none of",
    "release_lock_on_hipmalloc": "it changes locking, which a one-stream model has none of",
    "graph_capture_record_stream_reuse": "CUDA graphs are not modelled",
    **{key: "it configures the pinned host-memory allocator, not the GPU's"
       for key in ("pinned_use_cuda_host_register", "pinned_use_hip_host_register", "pinned_num_register_threads",
                   "pinned_reserve_segment_size_mb", "pinned_free_catch_all", "pinned_use_background_threads",
                   "pinned_max_round_threshold_mb", "pinned_max_cached_size_mb")},
}

#: ``kRoundUpPowerOfTwoIntervals``: ``roundup_power2_divisions`` has one number per power-of-two interval of request
#: sizes, from [1 MiB, 2 MiB) (and everything below) to [32 GiB, 64 GiB) (and everything above).
_DIVISION_INTERVALS = 16


def _interval(nbytes: int) -> int:
    """Index of the ``roundup_power2_divisions`` interval of a request (0 below 2 MiB, 15 from 32 GiB)."""
    return min(max(nbytes.bit_length() - 1 - 20, 0), _DIVISION_INTERVALS - 1) if nbytes > 0 else 0


def _parse_divisions(value: str) -> int | tuple[int, ...]:
    """``roundup_power2_divisions``: ``4`` or ``[256:4,512:2,>:1]`` (intervals in MiB), as
    ``AcceleratorAllocatorConfig::parseRoundUpPower2Divisions`` reads them: the first entry also sets every interval
    below it, ``>`` every interval after the last one named, and an interval not named keeps 0 (512-byte rounding)."""
    def divisions(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise ValueError(f"roundup_power2_divisions must be a power of 2 or 0, got {text!r}") from None
        if n < 0 or n & (n - 1):
            raise ValueError(f"roundup_power2_divisions must be a power of 2 or 0, got {text!r}")
        return n

    if not value.startswith("["):
        n = divisions(value)
        if n == 0:  # the plain form wants a power of two
            raise ValueError("roundup_power2_divisions must be a power of 2, got '0'")
        return n
    if not value.endswith("]"):
        raise ValueError(f"roundup_power2_divisions list must end with ']', got {value!r}")
    table, first, last = [0] * _DIVISION_INTERVALS, True, 0
    for item in filter(None, value[1:-1].split(",")):
        interval, sep, count = item.partition(":")
        if not sep:
            raise ValueError(f"roundup_power2_divisions entries are <MiB>:<divisions> or >:<divisions>, got {item!r}")
        n = divisions(count)
        if interval == ">":  # every interval after the last one named
            table[last + 1:] = [n] * (_DIVISION_INTERVALS - last - 1)
            continue
        try:
            mib = int(interval)
        except ValueError:
            mib = -1
        if mib <= 0 or mib & (mib - 1):
            raise ValueError(f"roundup_power2_divisions intervals must be powers of 2 (MiB), got {interval!r}")
        index = min(mib.bit_length() - 1, _DIVISION_INTERVALS - 1)
        if first:
            table[:index] = [n] * index
            first = False
        table[index], last = n, index
    return tuple(table)


@dataclass(frozen=True)
class AllocatorSettings:
    """The allocator's options, as ``PYTORCH_CUDA_ALLOC_CONF`` spells them (defaults: PyTorch's); :meth:`parse` refuses
    every other option the pinned PyTorch accepts, with the reason.

    Attributes:
        max_split_size_mb: blocks of at least this many MiB are never split (``None``: no limit).
        max_non_split_rounding_mb: with ``max_split_size_mb``, a larger request takes a cached block less than this
            many MiB larger (``None``: 20).
        roundup_power2_divisions: round requests to one of this many steps between two powers of two; an int, or 16,
            one per interval [1, 2) MiB ... [32, 64) GiB; 0 or 1: 512-byte rounding.
        expandable_segments: grow one segment per pool.
        per_process_memory_fraction: as ``torch.cuda.set_per_process_memory_fraction``; ``None``: none.

    Raises:
        ValueError: for a ``max_split_size_mb`` or ``max_non_split_rounding_mb`` below 20
            (``AcceleratorAllocatorConfig::parseMaxSplitSize``), or divisions that are not powers of two.
    """

    max_split_size_mb: int | None = None
    expandable_segments: bool = False
    roundup_power2_divisions: int | tuple[int, ...] = 0
    max_non_split_rounding_mb: int | None = None
    per_process_memory_fraction: float | None = None

    def __post_init__(self):
        lowest = K_LARGE_BUFFER // MiB  # PyTorch's rule: at least kLargeBuffer (20 MiB)
        for name in ("max_split_size_mb", "max_non_split_rounding_mb"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), lowest, what=f"a whole number of MiB >= {lowest}")
        if not isinstance(self.expandable_segments, bool):
            raise ValueError(f"expandable_segments must be True or False, got {self.expandable_segments!r}")
        fraction = self.per_process_memory_fraction
        if fraction is not None and (isinstance(fraction, bool) or not isinstance(fraction, (int, float))
                                     or not 0 <= fraction <= 1):
            raise ValueError(f"per_process_memory_fraction must be a number from 0 to 1, got {fraction!r}")
        table = self.roundup_power2_divisions
        if isinstance(table, int) and not isinstance(table, bool):
            table = (table,) * _DIVISION_INTERVALS
        if (not isinstance(table, tuple) or len(table) != _DIVISION_INTERVALS
                or any(isinstance(n, bool) or not isinstance(n, int) or n < 0 or n & (n - 1) for n in table)):
            raise ValueError("roundup_power2_divisions must be a power of 2 (or 0), or a tuple of 16 of them, "
                             f"got {self.roundup_power2_divisions!r}")

    @classmethod
    def parse(cls, conf: str) -> "AllocatorSettings":
        """Read ``"max_split_size_mb:128,expandable_segments:True"`` (empty: the defaults); spaces ignored,
        ``backend:native`` accepted.

        Raises:
            ValueError: for an option unknown or not modelled here (named, with the reason), or a bad value.
        """
        values: dict = {}
        items, depth, start = [], 0, 0
        conf = "".join(conf.split())
        for k, ch in enumerate(conf + ","):  # split at commas outside [...]
            depth += (ch == "[") - (ch == "]")
            if ch == "," and depth == 0:
                items.append(conf[start:k])
                start = k + 1
        for item in filter(None, items):
            key, sep, value = item.partition(":")
            if key in _REFUSED_OPTIONS:
                raise ValueError(f"allocator option {key} is not modelled: {_REFUSED_OPTIONS[key]}")
            if not sep or key not in ("max_split_size_mb", "max_non_split_rounding_mb", "expandable_segments",
                                      "roundup_power2_divisions", "per_process_memory_fraction", "backend"):
                raise ValueError(f"unknown allocator option {item!r}; this model knows max_split_size_mb:<MiB>, "
                                 "max_non_split_rounding_mb:<MiB>, roundup_power2_divisions:<n>|[<MiB>:<n>,...], "
                                 "expandable_segments:True|False, per_process_memory_fraction:<0..1> "
                                 "and backend:native")
            if key == "backend":
                if value != "native":
                    raise ValueError(f"allocator backend {value!r} is not modelled; this model is backend:native")
            elif key == "expandable_segments":
                if value not in ("True", "False"):
                    raise ValueError(f"expandable_segments must be True or False, got {value!r}")
                values[key] = value == "True"
            elif key == "roundup_power2_divisions":
                values[key] = _parse_divisions(value)
            elif key == "per_process_memory_fraction":
                try:
                    values[key] = float(value)
                except ValueError:
                    raise ValueError(f"per_process_memory_fraction must be a number from 0 to 1, got {value!r}") from None
            else:
                try:
                    values[key] = int(value)
                except ValueError:
                    raise ValueError(f"{key} must be a whole number of MiB, got {value!r}") from None
        return cls(**values)

    @property
    def max_split_size(self) -> int:
        """``max_split_size_mb`` in bytes (no limit: a number larger than any GPU)."""
        return 2**63 if self.max_split_size_mb is None else self.max_split_size_mb * MiB

    @property
    def max_non_split_rounding_size(self) -> int:
        """``max_non_split_rounding_mb`` in bytes (default 20 MiB, ``kLargeBuffer``)."""
        return K_LARGE_BUFFER if self.max_non_split_rounding_mb is None else self.max_non_split_rounding_mb * MiB

    def divisions(self, nbytes: int) -> int:
        """``roundup_power2_divisions(size)``: the divisions for a request of ``nbytes`` (0: none)."""
        table = self.roundup_power2_divisions
        return table if isinstance(table, int) else table[_interval(nbytes)]

    def __str__(self) -> str:
        parts = [f"max_split_size_mb:{self.max_split_size_mb}"] if self.max_split_size_mb is not None else []
        if self.max_non_split_rounding_mb is not None:
            parts.append(f"max_non_split_rounding_mb:{self.max_non_split_rounding_mb}")
        table = self.roundup_power2_divisions
        if isinstance(table, int) and table or isinstance(table, tuple) and len(set(table)) == 1 and table[0]:
            parts.append(f"roundup_power2_divisions:{table if isinstance(table, int) else table[0]}")
        elif isinstance(table, tuple) and any(table):
            parts.append("roundup_power2_divisions:[" + ",".join(f"{2**i}:{n}" for i, n in enumerate(table)) + "]")
        if self.expandable_segments:
            parts.append("expandable_segments:True")
        if self.per_process_memory_fraction is not None:
            parts.append(f"per_process_memory_fraction:{self.per_process_memory_fraction}")
        return ",".join(parts) or "defaults"
