"""The optimizers of a profiled step, their states, and the step inside backward (lessons 01, 05a)."""

from __future__ import annotations

from typing import Callable

import torch

from ..config import OPTIMIZERS

#: Bytes of optimizer state per float32 parameter, kept from the first step on (a paged optimizer's: wherever they are) (``torch/optim/sgd.py``: one
#: ``momentum_buffer``; ``adam.py``, ``adamw.py``: ``exp_avg`` and ``exp_avg_sq``). Adam's ``step`` counters are left
#: out: on a GPU they are host memory unless the optimizer is fused or capturable.
STATE_BYTES = {"sgd": 0, "sgd-momentum": 4, "adam": 8, "adamw": 8, "adamw8bit": 2, "bnb-adamw8bit": 2,
               "paged-adamw": 8, "paged-adamw8bit": 2}

#: Bytes per float32 parameter that the ``foreach`` implementation allocates for the length of ``optimizer.step()``:
#: Adam's square root of ``exp_avg_sq`` for every parameter at once (``torch._foreach_sqrt`` in
#: ``_multi_tensor_adam``). The fused implementations allocate none.
STEP_TEMPORARY_BYTES = {"sgd": 0, "sgd-momentum": 0, "adam": 4, "adamw": 4, "adamw8bit": 0, "bnb-adamw8bit": 0,
                        "paged-adamw": 0, "paged-adamw8bit": 0}

#: torchao's 8-bit AdamW (``torchao/optim/adam.py``; ``subclass_8bit.py``, ``OptimState8bit``): each moment of a
#: parameter of ``numel >= 4096`` weights, a multiple of the block, is one uint8 code per weight plus one float32 scale
#: per block of 256, and a 256-entry float32 code book; a smaller parameter keeps ``torch.zeros_like(p)`` states.
ADAMW8BIT_BLOCK = 256


def make_optimizer(name: str, params, fused: bool = False) -> torch.optim.Optimizer:
    """The optimizer ``name`` (one of :data:`helpers.config.OPTIMIZERS`) of a traced step.

    ``SGD(lr=0.01)``, with ``momentum=0.9`` for ``sgd-momentum``; ``Adam(lr=1e-3)``; ``AdamW(lr=1e-3,
    weight_decay=0.01)``; ``adamw8bit``: torchao's ``AdamW8bit`` (Dettmers et al., 2022, "8-bit Optimizers via
    Block-wise Quantization"), whose states run on fake tensors (bitsandbytes' do not); no fused variant.
    ``fused=False`` gives ``foreach=True``, PyTorch's default on a GPU.

    Raises:
        ValueError: for a name not in :data:`OPTIMIZERS`.
    """
    impl = {"fused": True} if fused else {"foreach": True}
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.01, **impl)
    if name == "sgd-momentum":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9, **impl)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-3, **impl)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, **impl)
    if name == "adamw8bit":
        from torchao.optim import AdamW8bit

        return AdamW8bit(params, lr=1e-3, weight_decay=0.01, block_size=ADAMW8BIT_BLOCK)
    if name in ("bnb-adamw8bit", "paged-adamw", "paged-adamw8bit"):
        params, bits, paged = list(params), 8 if name.endswith("8bit") else 32, name.startswith("paged")
        tensors = [t for p in params for t in (p["params"] if isinstance(p, dict) else [p])]
        if any(t.is_cuda for t in tensors):  # a real GPU: bitsandbytes' own
            from bitsandbytes import optim

            made = {"bnb-adamw8bit": optim.AdamW8bit, "paged-adamw": optim.PagedAdamW32bit,
                    "paged-adamw8bit": optim.PagedAdamW8bit}[name]
            return made(params, lr=1e-3, weight_decay=0.01)
        return BitsAndBytesAdamW(params, lr=1e-3, weight_decay=0.01, bits=bits, paged=paged)
    raise ValueError(f"unknown optimizer {name!r}; use one of {', '.join(OPTIMIZERS)}")


#: bitsandbytes' paged optimizers keep the states of a parameter of at least this many elements in CUDA unified memory,
#: those of a smaller one on the device (``Optimizer8bit.get_state_buffer``, ``bitsandbytes/optim/optimizer.py``).
PAGED_MIN_NUMEL = 100_000
#: Its 8-bit optimizers keep 32-bit states for a parameter of fewer elements (``min_8bit_size``), and one float32
#: scale per block of this many values of each 8-bit state (``Optimizer2State.init_state``).
BNB_MIN_8BIT_SIZE, BNB_8BIT_BLOCK = 4096, 256


class BitsAndBytesAdamW(torch.optim.Optimizer):
    """bitsandbytes' ``PagedAdamW32bit``, ``PagedAdamW8bit`` or ``AdamW8bit`` (``bits``, ``paged``; Hugging Face's
    ``optim="paged_adamw_32bit"``, the QLoRA paper's, ``"paged_adamw_8bit"`` or ``"adamw_bnb_8bit"``), as its CUDA code
    path allocates (``Optimizer2State.init_state``,
    ``get_state_buffer``, ``bitsandbytes/optim/optimizer.py``). At its first step each trainable parameter gets two
    states of its shape: float32, or with 8 bits (from :data:`BNB_MIN_8BIT_SIZE` elements) uint8 codes with a float32
    scale per :data:`BNB_8BIT_BLOCK` values, and the first such parameter brings the two 256-value float32 code books
    to the device. A state of fewer than :data:`PAGED_MIN_NUMEL` elements is on the device (through PyTorch's
    allocator: counted), a larger one of a paged optimizer in unified memory that the driver allocates (``cudaMallocManaged``) and
    PyTorch's allocator never sees: :attr:`paged_bytes` counts those. Each update is one in-place kernel per
    parameter: no temporaries. (bitsandbytes' own class keeps every state on the device for the simulation's
    tensors, which are CPU tensors: its CPU branch.)

    Attributes:
        paged_bytes: bytes of states in unified memory, not counted by ``torch.cuda.memory_allocated``.
    """

    def __init__(self, params, lr: float = 1e-3, weight_decay: float = 1e-2, bits: int = 32, paged: bool = True):
        super().__init__(params, {"lr": lr, "weight_decay": weight_decay})
        self.bits, self.paged, self.paged_bytes, self.code_books = bits, paged, 0, None

    def _buffer(self, p: torch.Tensor, dtype: torch.dtype) -> torch.Tensor | None:
        """``get_state_buffer``: a state on the device, or None for one paged (counted in :attr:`paged_bytes`)."""
        if not self.paged or p.numel() < PAGED_MIN_NUMEL:
            return torch.zeros_like(p, dtype=dtype)
        self.paged_bytes += p.numel() * dtype.itemsize
        return None

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    eight = self.bits == 8 and p.numel() >= BNB_MIN_8BIT_SIZE
                    if eight and self.code_books is None:  # signed and unsigned dynamic maps, copied from the host
                        self.code_books = [torch.empty(256, dtype=torch.float32, device=p.device) for _ in range(2)]
                    dtype = torch.uint8 if eight else torch.float32
                    state["state1"], state["state2"] = self._buffer(p, dtype), self._buffer(p, dtype)
                    if eight:
                        state["qmap1"], state["qmap2"] = self.code_books
                        blocks = -(-p.numel() // BNB_8BIT_BLOCK)
                        state["absmax1"], state["absmax2"] = (torch.zeros(blocks, device=p.device) for _ in range(2))
                state["step"] += 1


def paged_bytes(optimizer) -> int:
    """Bytes of ``optimizer``'s states in CUDA unified memory: :attr:`BitsAndBytesAdamW.paged_bytes`, or on a GPU the states
    bitsandbytes marks ``is_paged``; 0 for any other optimizer."""
    if isinstance(optimizer, BitsAndBytesAdamW):
        return optimizer.paged_bytes
    states = getattr(optimizer, "state", {}).values()
    return sum(t.nbytes for state in states for t in state.values() if getattr(t, "is_paged", False))


def add_optimizer(runner) -> None:
    """The recipe's optimizer step: ``runner.optimizer`` for the placed ``runner.model``, made by the meter
    (:meth:`helpers.engine.meter.Meter.optimizer`); a :class:`StepInBackward` with ``config.step_in_backward``."""
    config, meter, params = runner.config, runner.meter, runner.model.parameters()

    def make(group) -> torch.optim.Optimizer:
        return make_optimizer(config.optimizer, group, config.fused)

    if config.step_in_backward:
        runner.optimizer = StepInBackward(params, lambda group: meter.optimizer(make(group)))
    elif config.optimizer_offload:
        runner.optimizer = meter.offloaded_optimizer(make, params)
    else:
        runner.optimizer = meter.optimizer(make(params))


def device_states(optimizer) -> dict:
    """The optimizer's states on the device, by parameter (for ``CPUOffloadOptimizer``: its GPU optimizer's)."""
    if hasattr(optimizer, "state"):
        return optimizer.state
    on_device = getattr(optimizer, "d_opt", None)
    return on_device.state if on_device is not None else {}


class StepInBackward:
    """The optimizer step inside backward: one optimizer per parameter (``make([p])``), stepped by its
    ``register_post_accumulate_grad_hook``, which then frees the gradient; :meth:`step` and :meth:`zero_grad` do
    nothing. PyTorch's tutorial "How to save memory by fusing the optimizer step into the backward pass"."""

    def __init__(self, params, make: Callable[[list], torch.optim.Optimizer]):
        self.optimizers = {p: make([p]) for p in params if p.requires_grad}
        self.stepped: set = set()
        self._seen: Callable[[torch.Tensor], None] | None = None
        self.handles = [p.register_post_accumulate_grad_hook(self._hook) for p in self.optimizers]

    def start(self, seen: Callable[[torch.Tensor], None] | None = None) -> None:
        """Begin a step: forget which parameters were stepped; ``seen(grad)`` sees each gradient before it is freed."""
        self.stepped = set()
        self._seen = seen

    def _hook(self, p: torch.Tensor) -> None:
        if self._seen is not None:
            self._seen(p.grad)
        optimizer = self.optimizers[p]
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        self.stepped.add(p)

    @property
    def state(self) -> dict:
        """Every parameter's optimizer state."""
        return {p: opt.state[p] for p, opt in self.optimizers.items() if p in opt.state}

    def step(self) -> None:
        """Nothing: each parameter was stepped during backward."""

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Nothing: each gradient was freed during backward."""
