"""The optimizers of a profiled step, their states, and the step inside backward (lessons 01, 05a)."""

from __future__ import annotations

from typing import Callable

import torch

from ..config import OPTIMIZERS

#: Bytes of optimizer state per float32 parameter, kept from the first step on (``torch/optim/sgd.py``: one
#: ``momentum_buffer``; ``adam.py``, ``adamw.py``: ``exp_avg`` and ``exp_avg_sq``). Adam's ``step`` counters are left
#: out: on a GPU they are host memory unless the optimizer is fused or capturable.
STATE_BYTES = {"sgd": 0, "sgd-momentum": 4, "adam": 8, "adamw": 8, "adamw8bit": 2}

#: Bytes per float32 parameter that the ``foreach`` implementation allocates for the length of ``optimizer.step()``:
#: Adam's square root of ``exp_avg_sq`` for every parameter at once (``torch._foreach_sqrt`` in
#: ``_multi_tensor_adam``). The fused implementations allocate none.
STEP_TEMPORARY_BYTES = {"sgd": 0, "sgd-momentum": 0, "adam": 4, "adamw": 4, "adamw8bit": 0}

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
    raise ValueError(f"unknown optimizer {name!r}; use one of {', '.join(OPTIMIZERS)}")


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
