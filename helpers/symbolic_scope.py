"""Which steps a symbolic log answers (:mod:`helpers.symbolic`): the configurations one log answers (:func:`key`),
and the steps that can be traced with symbolic sizes at all (:func:`applies`).

No torch import (but where ``device="auto"`` must ask torch whether there is a GPU: :func:`cuda_ruled_out`): the
command line's cold answer (:mod:`helpers.cli_cold`) asks both before it reads a log on disk.
"""

from __future__ import annotations

import glob
import os
import sys

from .config import StepConfig

#: Device files of which one exists wherever a CUDA device can be seen on Linux: the NVIDIA driver's
#: (``/dev/nvidiactl``, ``/dev/nvidia0``, ...), WSL 2's GPU paravirtualisation (``/dev/dxg``), and ROCm's
#: (``/dev/kfd``, which PyTorch's ROCm builds report through ``torch.cuda``).
GPU_DEVICE_FILES = ("/dev/nvidiactl", "/dev/nvidia[0-9]*", "/dev/dxg", "/dev/kfd")


def key(config: StepConfig) -> StepConfig:
    """``config`` without its batch size and sequence length: the configurations one symbolic log answers."""
    return config.replace(batch_size=1, seq_len=None if config.seq_len is None else 1)


def cuda_ruled_out() -> bool:
    """Whether ``torch.cuda.is_available()`` is False here for certain, known without importing torch: on Linux, none
    of :data:`GPU_DEVICE_FILES` exists (CUDA's driver opens them to find a device); on macOS, PyTorch's builds have no
    CUDA.  False where it cannot be told so (Windows, or a device file present): then torch must be asked
    (:func:`helpers.engine.backends.resolve_backend`)."""
    if sys.platform == "darwin":
        return True
    return sys.platform.startswith("linux") and not any(glob.glob(pattern) for pattern in GPU_DEVICE_FILES) \
        and os.path.isdir("/dev")


def applies(config: StepConfig) -> str | None:
    """Why ``config``'s step cannot be traced with symbolic sizes, or None if it can: a real GPU measures, a
    simulated ``capacity`` stops the step where the bytes run out (a comparison), ``full_trace`` asks for a trace,
    ``symbolic=False`` for a concrete step (:class:`helpers.config.StepConfig`)."""
    if config.device != "simulated" and not (config.device == "auto" and cuda_ruled_out()):
        from .engine.backends import resolve_backend  # "auto" asks torch whether there is a GPU

        if resolve_backend(config.device) != "simulated":
            return "a real GPU measures each step"
    if config.capacity is not None:
        return "a simulated capacity (capacity=) stops the step where it runs out, a comparison of sizes"
    if config.full_trace:
        return "a full trace was asked for (full_trace=True)"
    if not config.symbolic:
        return "a concrete step was asked for (symbolic=False)"
    if config.workspaces != "none":
        return "kernels' own bytes (workspaces=) follow rules that compare sizes"
    return None
