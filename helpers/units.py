"""Bytes and how the lessons write them.

All sizes in :mod:`helpers` are bytes.  1 MiB = 2**20 bytes, as PyTorch and
``nvidia-smi`` count; 1 MB = 10**6 bytes, as papers and vendors often do.
"""

from __future__ import annotations

KiB = 2**10
MiB = 2**20
GiB = 2**30

_SCALE = {"B": 1, "KiB": KiB, "MiB": MiB, "GiB": GiB, "TiB": 2**40, "MB": 10**6, "GB": 10**9}


def fmt_bytes(nbytes: float, unit: str = "MiB", sign: bool = False, grouped: bool = False) -> str:
    """Format a byte count, e.g. ``fmt_bytes(411041792) == '392.0 MiB'``.

    Args:
        nbytes: bytes (may be negative, for a change).
        unit: one of ``B``, ``KiB``, ``MiB``, ``GiB``, ``TiB``, ``MB``, ``GB``. The ``i`` units are powers of 2 (as
            PyTorch and nvidia-smi use), ``MB`` and ``GB`` powers of 10.
        sign: show ``+`` for positive values (for deltas).
        grouped: separate thousands with commas (``'16,160.0 MiB'``), as the
            widgets write sizes beside a GPU's capacity.

    Raises:
        ValueError: for an unknown unit.
    """
    if unit not in _SCALE:
        raise ValueError(f"unknown unit {unit!r}; use one of {', '.join(_SCALE)}")
    value = nbytes / _SCALE[unit]
    digits = 0 if unit == "B" else 1
    return f"{value:{'+' if sign else ''}{',' if grouped else ''}.{digits}f} {unit}"


def fmt_mib(nbytes: float) -> str:
    """MiB with thousands grouped, as the widgets write sizes beside a GPU's capacity:
    ``fmt_mib(16160 * MiB) == '16,160.0 MiB'``."""
    return fmt_bytes(nbytes, "MiB", grouped=True)


def cuda_size(nbytes: int) -> str:
    """Format bytes as the CUDA caching allocator's messages do.

    ``bytes`` up to 1 KiB, then KiB, MiB or GiB with two decimals
    (``format_size`` in c10/cuda/CUDACachingAllocator.cpp): ``cuda_size(3 * 2**29) == '1.50 GiB'``.
    """
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if nbytes > scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes} bytes"


def unit_scale(unit: str, allowed: tuple[str, ...] = ("MiB", "GiB")) -> int:
    """Bytes in one ``unit``, for a figure that offers the ``allowed`` units: ``unit_scale("GiB") == 2**30``.

    Raises:
        ValueError: for a unit not in ``allowed`` (``"unit must be one of MiB, GiB, got 'GB'"``).
    """
    if unit not in allowed or unit not in _SCALE:
        raise ValueError(f"unit must be one of {', '.join(allowed)}, got {unit!r}")
    return _SCALE[unit]
