"""The simulated GPU's storage tracker: the counting core plus what a CUDA GPU allocates besides (lesson 00)."""

from __future__ import annotations

import torch

from ..allocator.rules import allocation_size
from ..gpus import CUDA_OVERHEAD_BYTES, headroom, oom_message, simulated_card
from .autocast import autocast_again
from .bnb_rules import BNB_CUDA
from .counting import StorageTracker
from .cuda_rules import CUBLAS_OPERANDS, cublas_operand_copy, cuda_allocation_order
from .workspaces import KernelMemory, run_with_kernel_memory


class SimulatedTracker(StorageTracker):
    """The :class:`helpers.engine.counting.StorageTracker` of the simulated GPU.

    It adds a **capacity**: a storage that would take the tensor bytes above :func:`helpers.gpus.headroom` raises
    ``torch.OutOfMemoryError`` with a CUDA-shaped :func:`helpers.gpus.oom_message` (``requested`` and ``allocated``
    attributes, bytes); **composites under inference mode** (``cross_entropy``, ``to``), which autograd does not split
    there, are split here, with autocast again if it was on, as a GPU's dispatcher does; and cuBLAS's operand copies
    (:func:`cublas_operand_copy`); and it tracks results in the order CUDA's kernel allocates them
    (:func:`cuda_allocation_order`). ``capacity``: simulate a GPU of this many bytes (``None``: no limit).  What kernels
    allocate for themselves, by ``workspaces`` (:data:`helpers.config.WORKSPACES`) on the card of ``capacity``
    (:func:`helpers.gpus.simulated_card`): :attr:`kernels`, a :class:`helpers.engine.workspaces.KernelMemory`.
    """

    def __init__(self, capacity: int | None = None, workspaces: str = "none"):
        super().__init__(None)
        self.capacity = capacity
        self._room = None if capacity is None else headroom(capacity)
        self.kernels = KernelMemory(workspaces, simulated_card(capacity))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if (not self.paused and torch.is_inference_mode_enabled() and func.namespace == "aten"
                and torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd")):
            with self, autocast_again():
                out = func.decompose(*args, **(kwargs or {}))
            if out is not NotImplemented:
                return out
        if not self.paused and func.namespace == "bitsandbytes" and (cuda := BNB_CUDA.get(func.name())):
            with self:
                return cuda(*args, **(kwargs or {}))
        if self.paused:
            out = super().__torch_dispatch__(func, types, args, kwargs)
        else:
            dispatch = super().__torch_dispatch__
            out = run_with_kernel_memory(self.kernels, self, lambda f, a, k: dispatch(f, types, a, k), func, args, kwargs)
        if func in CUBLAS_OPERANDS and not self.paused:  # after the result, as cuBLAS's caller allocates them
            copies = [self.transient(n, args[i].dtype, args[i].shape) for i in CUBLAS_OPERANDS[func]
                      if (n := cublas_operand_copy(args[i]))]
            for serial in copies:
                self.release(serial)
        return out

    def allocation_order(self, func, args: tuple, out) -> list:
        """A CUDA kernel's own order where it differs from the returned one (:func:`cuda_allocation_order`)."""
        order = cuda_allocation_order(func, args, out)
        return order if order is not None else super().allocation_order(func, args, out)

    def before_alloc(self, nbytes: int) -> None:
        if self._room is not None and self.allocated + nbytes > self._room:
            in_use = self.allocated + CUDA_OVERHEAD_BYTES
            error = torch.OutOfMemoryError(
                oom_message(allocation_size(nbytes), self.capacity, in_use, self.allocated, self.allocated))
            error.requested, error.allocated = allocation_size(nbytes), self.allocated  # for DoesNotFit
            raise error
