"""One whole training step through PyTorch's own CUDA dispatch, on the stub driver (issue 23).

Run only in a subprocess with the stub preloaded (``tests/cuda_stub/build.py``,
``stub_env``): ``LD_PRELOAD=<stub>/libcuda.so.1 python whole_step.py < cases.json``.
With the stub, ``torch.cuda.is_available()`` is True, so the step below runs
CUDA's autocast lists, CUDA's kernel choices (``scaled_dot_product_attention``
asks the card the stub reports which fused kernel it can run) and CUDA's
autograd engine, on fake tensors of the ``cuda`` device
(``FakeTensorMode``): shapes, dtypes and lifetimes, no data, no kernel runs.

The step is written in plain PyTorch, as a training loop writes it, and
counted only by the engine's core (:class:`helpers.engine.counting.StorageTracker`,
each storage rounded up to 512 bytes), not by the simulation's CUDA rules:

1. the model (built by :mod:`helpers.models`, on the fake ``cuda`` device), its
   parameters and buffers counted; ``AdamW(lr=1e-3, weight_decay=0.01,
   foreach=True)``, as :func:`helpers.techniques.optimizers.make_optimizer`
   makes it; under float16 AMP ``torch.amp.GradScaler("cuda")``;
2. a batch: float images ``(batch, 3, 224, 224)`` and class ids, or token ids
   ``(batch, seq)`` and next-token targets for GPT-2;
3. forward and cross-entropy loss under ``torch.autocast("cuda", dtype=torch.float16)``
   (AMP) or in float32;
4. ``scaler.scale(loss).backward()`` (or ``loss.backward()``);
5. ``scaler.step(optimizer); scaler.update()`` (or ``optimizer.step()``);
6. ``optimizer.zero_grad(set_to_none=True)``.

The step runs twice; the second (steady state: the optimizer states exist) is
measured.  Fake tensors hold no values, so the scaler cannot look for an inf:
it always takes the step (``_maybe_opt_step`` reads ``found_inf.item()``),
which changes no allocation.

Input (stdin): a JSON list of cases ``{"model": name, "batch": n, "seq_len": n or
null, "amp": bool, "kernel": null or one of KERNELS}`` (``kernel`` forces one SDPA
backend with ``torch.nn.attention.sdpa_kernel``; by default PyTorch picks).
Output (stdout, last line): a JSON list, for each case, ``{"peak": bytes,
"backward_peak": bytes, "categories": {...}, "attention": [...], "at_peak":
[...], "seconds": s}``: the measured step's peak, its peak up to
``loss.backward()`` returning, the bytes alive at the peak by kind
(parameters and buffers, gradients, optimizer_states, input, other), the SDPA
kernels that ran (``"flash"``, ``"efficient"``, ``"cudnn"`` by their
``aten`` operator, ``"math"`` when SDPA ran none of them: the math kernel is a
composite of matmuls and a softmax), and ``[dtype, shape, bytes]`` of every
storage alive at the peak (to find what differs).

Nothing is copied from the host: ``torch.tensor(..., device="cuda")`` would
copy host data with the CUDA runtime (``cudaMemcpyAsync``), which the stub
does not provide, so the model is built on ``meta`` and given fake ``cuda``
storages (:func:`place`).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.nn.attention import SDPBackend, sdpa_kernel

from helpers.engine.counting import StorageTracker
from helpers.models import resolve_model, output_logits

#: The fused kernels of ``scaled_dot_product_attention`` (``sdp::SDPBackend`` in
#: ``aten/src/ATen/native/transformers/sdp_utils_cpp.h``), by their forward operator.
FUSED = {
    "_scaled_dot_product_flash_attention": "flash",
    "_scaled_dot_product_efficient_attention": "efficient",
    "_scaled_dot_product_cudnn_attention": "cudnn",
}

#: ``kernel`` of a case: the one backend ``torch.nn.attention.sdpa_kernel`` allows (default: PyTorch picks).
KERNELS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION",
           "math": "MATH"}


class Recorder(StorageTracker):
    """The core tracker, noting which fused attention operators reach the dispatch."""

    def __init__(self):
        super().__init__("cuda")
        self.attention: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.name().removeprefix("aten::")
        if name in FUSED:
            self.attention.add(FUSED[name])
        return super().__torch_dispatch__(func, types, args, kwargs)


class SDPACalls:
    """Counts calls of ``torch.nn.functional.scaled_dot_product_attention`` while active
    (a composite: the dispatch sees only the kernels it picks, none for the math kernel)."""

    def __init__(self):
        self.calls = 0
        self._original = F.scaled_dot_product_attention

    def __enter__(self):
        def counted(*args, **kwargs):
            self.calls += 1
            return self._original(*args, **kwargs)

        F.scaled_dot_product_attention = counted  # torchvision's MultiheadAttention and GPT look it up here
        return self

    def __exit__(self, *exc):
        F.scaled_dot_product_attention = self._original


class FakeGradScaler(torch.amp.GradScaler):
    """``GradScaler("cuda")``, always taking the step: fake tensors have no values to find an inf in."""

    def _maybe_opt_step(self, optimizer, optimizer_state, *args, **kwargs):
        return optimizer.step(*args, **kwargs)


def place(net: torch.nn.Module) -> torch.nn.Module:
    """``net.to("cuda")`` from the ``meta`` device: an empty fake ``cuda`` tensor for each
    parameter and buffer, one per tensor however many modules register it (a tied head)."""
    fresh: dict[int, torch.Tensor] = {}
    for module in net.modules():
        for table in (module._parameters, module._buffers):
            for key, t in table.items():
                if t is not None:
                    if id(t) not in fresh:
                        new = torch.empty(t.shape, dtype=t.dtype, device="cuda")
                        fresh[id(t)] = torch.nn.Parameter(new, t.requires_grad) if table is module._parameters else new
                    table[key] = fresh[id(t)]
    return net


def training_step(net: torch.nn.Module, spec, optimizer: torch.optim.Optimizer, scaler, batch: int,
                  seq_len: int | None, amp: bool, kernels=contextlib.nullcontext,
                  after_backward=lambda: None, amp_dtype: torch.dtype = torch.float16,
                  sample_shape: tuple[int, ...] = (3, 224, 224), classes: int = 1000,
                  keep_loss: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """One step as a training loop writes it (the module's docstring, 2 to 6), on the ``cuda`` device; returns the
    batch (images of ``sample_shape`` and ``classes`` class ids without a ``seq_len``).  ``after_backward()`` runs once ``backward`` has returned, before the optimizer step.  Also
    real_step.py's.  The loss is dropped once backward has run, unless ``keep_loss``: then it lives to the end of the
    step, as in a loop that writes ``loss = ...; loss.backward(); optimizer.step()`` (and in the simulation's,
    :meth:`helpers.step.StepRunner.run`), and with it the autograd graph, whose nodes keep what a custom function put
    on its context (bitsandbytes' ``MatMul8bitLt`` keeps its input in ``ctx.tensors``)."""
    if seq_len is not None:
        x = torch.randint(0, spec.vocab_size, (batch, seq_len), device="cuda")
        y = torch.randint(0, spec.vocab_size, (batch, seq_len), device="cuda")
    else:
        x = torch.randn(batch, *sample_shape, device="cuda")
        y = torch.randint(0, classes, (batch,), device="cuda")
    with torch.autocast("cuda", dtype=amp_dtype, enabled=amp), kernels():
        logits = output_logits(net(x))
        loss = (F.cross_entropy(logits.flatten(0, 1), y.flatten()) if seq_len is not None
                else F.cross_entropy(logits, y))
    del logits  # the batch lives through the step, as a loop's `for x, y in loader` keeps it
    if scaler is not None:
        scaler.scale(loss).backward()
    else:
        loss.backward()
    kept = loss if keep_loss else None  # noqa: F841 (alive to the end of the step)
    del loss
    after_backward()
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return x, y


def run_case(model: str, batch: int, seq_len: int | None, amp: bool, kernel: str | None = None,
             lora_rank: int = 0) -> dict:
    """One case (see the module's docstring): build, place, two steps, the second measured.
    With ``lora_rank`` (a Hugging Face model), peft's LoRA adapters on peft's default
    targets, the base weights frozen, as ``helpers.techniques.lora.apply_lora`` adds them."""
    start = time.perf_counter()
    kernels = (lambda: contextlib.nullcontext()) if kernel is None else (
        lambda: sdpa_kernel(getattr(SDPBackend, KERNELS[kernel])))
    spec = resolve_model(model)
    with torch.device("meta"):
        net = spec.build().train()
        if lora_rank:
            from helpers.techniques.lora import apply_lora
            net = apply_lora(net, lora_rank)
    fake, tracker, sdpa = FakeTensorMode(), Recorder(), SDPACalls()
    with fake:
        net = place(net)
    with fake, tracker, sdpa:
        params = {tracker.track(t) for t in (*net.parameters(), *net.buffers())}
        trained = [p for p in net.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trained, lr=1e-3, weight_decay=0.01, foreach=True)
        scaler = FakeGradScaler("cuda") if amp else None
        inputs: set = set()
        backward_peak: list[int] = []

        def step():
            grads: set = set()

            def after_backward():
                backward_peak.append(tracker.peak)
                grads.update(tracker.serial_of(p.grad) for p in net.parameters() if p.grad is not None)

            x, y = training_step(net, spec, optimizer, scaler, batch, seq_len, amp, kernels, after_backward)
            inputs.update({tracker.serial_of(x), tracker.serial_of(y)})
            return grads

        step()
        tracker.reset_peak()
        grads = step()
        states = {tracker.serial_of(t) for state in optimizer.state.values() for t in state.values()
                  if isinstance(t, torch.Tensor)}
    categories = dict.fromkeys(("parameters", "gradients", "optimizer_states", "input", "other"), 0)
    for serial in tracker.peak_serials:
        kind = ("parameters" if serial in params else "gradients" if serial in grads else
                "optimizer_states" if serial in states else "input" if serial in inputs else "other")
        categories[kind] += tracker.sizes[serial]
    attention = sorted(tracker.attention) or (["math"] if sdpa.calls else [])
    return {"peak": tracker.peak, "backward_peak": backward_peak[-1], "categories": categories, "attention": attention,
            "at_peak": sorted([str(tracker.dtypes[s]).removeprefix("torch."), list(tracker.shapes[s]), tracker.sizes[s]]
                              for s in tracker.peak_serials),
            "seconds": round(time.perf_counter() - start, 2)}


def main() -> None:
    cases = json.load(sys.stdin)
    if not torch.cuda.is_available():
        raise SystemExit("the stub did not load: torch.cuda.is_available() is False")
    print(json.dumps([run_case(c["model"], c["batch"], c.get("seq_len"), c["amp"], c.get("kernel"), c.get("lora_rank", 0)) for c in cases]))


if __name__ == "__main__":
    main()
