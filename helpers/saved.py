"""What autograd saves for backward, tensor by tensor (lesson 02).

:func:`inspect_saved` lists the saved tensors with ``torch.autograd.graph.saved_tensors_hooks``
(https://pytorch.org/docs/stable/notes/autograd.html#hooks-for-saved-tensors): the *pack* hook keeps each saved tensor
in a table; then the graph is walked from the output and each node's ``_saved_*`` attributes read, which calls the
*unpack* hook and names the node and attribute.  A saved storage that is an input, output or parameter costs nothing
extra; the others are counted once.  :func:`forward_saved_bytes` sums what a forward pass saves on fake CPU or CUDA
tensors (lessons 00 and 04).  Mask ReLUs are in :mod:`helpers.masks`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from .allocator.rules import round_up


@dataclass(frozen=True)
class SavedTensor:
    """One tensor saved for backward.

    Attributes:
        node, attribute: the autograd node that saved it (``ConvolutionBackward0``) and its name for it (``self``).
        module: the module whose forward was running (``""`` if none).
        shape, dtype, nbytes: the saved tensor's, and the bytes of its whole storage, exact (not rounded to 512).
        same_as: ``"input"``, ``"output"``, ``"input = output (in place)"``, ``"parameter <name>"``,
            ``"buffer <name>"``, ``"saved above"``, or ``"new"``: the only kind that costs extra memory.
    """

    node: str
    attribute: str
    module: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    nbytes: int
    same_as: str

    @property
    def extra_bytes(self) -> int:
        """Bytes this saved tensor adds: its storage if ``new``, else 0."""
        return self.nbytes if self.same_as == "new" else 0


@dataclass(frozen=True)
class SavedReport:
    """The saved tensors of one forward pass: ``saved``, each in graph-walk order (output back to input), and the
    storage bytes (exact, not rounded to 512) of the inputs, the outputs, and the module's parameters and buffers."""

    saved: list[SavedTensor]
    input_bytes: int
    output_bytes: int
    parameter_bytes: int

    @property
    def extra_bytes(self) -> int:
        """Bytes that the saved tensors keep beyond inputs, outputs and parameters."""
        return sum(s.extra_bytes for s in self.saved)

    def table(self) -> str:
        """The saved tensors as text, one per line."""
        lines = [f"{'saved by':<40} {'module':<10} {'shape':<20} {'dtype':<9} {'bytes':>10}  same storage as"]
        for s in self.saved:
            where = f"{s.node}.{s.attribute}"
            lines.append(f"{where:<40.40} {s.module:<10.10} {str(tuple(s.shape)):<20} "
                         f"{str(s.dtype).replace('torch.', ''):<9} {s.nbytes:>10,}  {s.same_as}")
        lines.append(f"extra memory kept for backward: {self.extra_bytes:,} bytes "
                     f"(input {self.input_bytes:,}, output {self.output_bytes:,}, "
                     f"parameters and buffers {self.parameter_bytes:,}); "
                     f"exact storage sizes, before the GPU allocator's 512-byte rounding")
        return "\n".join(lines)


def _storage(t: torch.Tensor) -> tuple[int, int]:
    st = t.untyped_storage()
    return st.data_ptr(), st.nbytes()


def _tensors(obj) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [t for o in obj for t in _tensors(o)]
    return []


class _Saves:
    """The pack and unpack hooks of :func:`inspect_saved`, and what they record."""

    def __init__(self):
        self.packed: list[torch.Tensor] = []  # every saved tensor, in the order it was saved
        self.modules: list[str] = []  # the leaf module running when each was saved
        self.seen: dict[int, tuple[str, str]] = {}  # packed index -> (node, attribute)
        self.order: list[int] = []  # packed indices, in the order the graph walk met them
        self.current, self.walking = "", ("", "")

    def pack(self, t: torch.Tensor) -> int:
        self.packed.append(t)
        self.modules.append(self.current)
        return len(self.packed) - 1

    def unpack(self, i: int) -> torch.Tensor:
        if i not in self.seen:
            self.seen[i] = self.walking
            self.order.append(i)
        return self.packed[i]


def inspect_saved(module: nn.Module, *inputs: torch.Tensor) -> SavedReport:
    """Run ``module(*inputs)`` once (real tensors) and list every tensor autograd saves, as a :class:`SavedReport`.

    Floating-point inputs are replaced by non-leaf copies that require grad, as activations inside a network are, so
    that every save shows.

    Raises:
        ValueError: if no input is a tensor, or the output does not require grad.
    """
    if not inputs or not all(isinstance(x, torch.Tensor) for x in inputs):
        raise ValueError("inspect_saved needs the module's input tensors")
    # Not leaves: in-place layers refuse leaves.  CloneBackward0 itself saves nothing.
    inputs = tuple(x.detach().requires_grad_().clone() if x.is_floating_point() else x for x in inputs)
    saves = _Saves()
    names = {m: n for n, m in module.named_modules()}

    def pre(mod, args):
        if not list(mod.children()):
            saves.current = names[mod] or type(mod).__name__

    handles = [m.register_forward_pre_hook(pre) for m in module.modules()]
    try:
        with torch.autograd.graph.saved_tensors_hooks(saves.pack, saves.unpack):
            output = module(*inputs)
    finally:
        for h in handles:
            h.remove()
    outputs = _tensors(output)
    if not any(o.grad_fn is not None for o in outputs):
        raise ValueError("the output does not require grad: autograd saved nothing")
    _walk_graph(outputs, saves)

    def total(tensors) -> int:
        return sum(nbytes for nbytes in {_storage(t)[0]: _storage(t)[1] for t in tensors}.values())

    return SavedReport(_classify(module, inputs, outputs, saves), total(inputs), total(outputs),
                       total(list(module.parameters()) + list(module.buffers())))


def _walk_graph(outputs: list[torch.Tensor], saves: _Saves) -> None:
    """Walk the graph from the outputs; reading a node's saved tensors unpacks them, naming each."""
    stack = [o.grad_fn for o in outputs if o.grad_fn is not None]
    visited = set()
    while stack:
        node = stack.pop()
        if node is None or node in visited:
            continue
        visited.add(node)
        attrs = sorted(a for a in dir(node) if a.startswith("_saved_"))
        if "saved_tensors" in dir(node):  # a custom autograd.Function's ctx.save_for_backward
            attrs.append("saved_tensors")
        for attr in attrs:
            saves.walking = (type(node).__name__, attr.removeprefix("_saved_"))
            getattr(node, attr)  # a saved tensor calls unpack; other values do not
        stack.extend(fn for fn, _ in reversed(node.next_functions))
    for i in range(len(saves.packed)):  # saved by a node the walk could not read
        if i not in saves.seen:
            saves.seen[i] = ("(unknown node)", "?")
            saves.order.append(i)


def _classify(module: nn.Module, inputs, outputs: list[torch.Tensor], saves: _Saves) -> list[SavedTensor]:
    """Each saved tensor with the storage it shares (:attr:`SavedTensor.same_as`), in walk order."""
    kinds: dict[int, str] = {}
    for x in inputs:
        kinds.setdefault(_storage(x)[0], "input")
    for o in outputs:
        ptr = _storage(o)[0]
        kinds[ptr] = "input = output (in place)" if kinds.get(ptr) == "input" else kinds.get(ptr, "output")
    for name, p in module.named_parameters():
        kinds.setdefault(_storage(p)[0], f"parameter {name}")
    for name, b in module.named_buffers():
        kinds.setdefault(_storage(b)[0], f"buffer {name}")
    saved = []
    for i in saves.order:
        t = saves.packed[i]
        ptr, nbytes = _storage(t)
        same_as = kinds.get(ptr, "new")
        kinds.setdefault(ptr, "saved above")
        node, attribute = saves.seen[i]
        saved.append(SavedTensor(node, attribute, saves.modules[i], tuple(t.shape), t.dtype, nbytes, same_as))
    return saved


@contextlib.contextmanager
def _autocast(device: str, dtype: torch.dtype | None):
    """Autocast for ``device`` (``torch.autocast("cuda")`` turns itself off without a GPU)."""
    if dtype is None:
        yield
        return
    enabled, previous = torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)
    torch.set_autocast_enabled(device, True)
    torch.set_autocast_dtype(device, dtype)
    try:
        yield
    finally:
        torch.set_autocast_enabled(device, enabled)
        torch.set_autocast_dtype(device, previous)


def forward_saved_bytes(model: str | Callable[[], nn.Module], input_shape: tuple[int, ...], *,
                        device: str = "cpu", autocast_dtype: torch.dtype | None = None,
                        num_classes: int | None = None, input_requires_grad: bool = False) -> dict[torch.dtype, int]:
    """Bytes that autograd saves in one forward pass, ``{dtype: bytes}``, as ``device`` would save them.

    On fake tensors: ``"cpu"`` runs the CPU's kernels and autocast lists; ``"cuda"`` a fake GPU's (no GPU needed: only
    backward needs one, pytorch/pytorch#92627); ``"simulated"`` the CPU's under
    :func:`helpers.engine.cuda_rules.cuda_rules`.  Each saved storage is counted once, rounded up to 512 bytes.

    Args:
        model: a torchvision classifier name, or a function returning a fresh module.
        input_shape: shape of the whole input, e.g. ``(128, 3, 224, 224)``.
        autocast_dtype: autocast's dtype, or ``None`` for no autocast.
        num_classes: add a cross-entropy loss over this many classes (``None``: none).
        input_requires_grad: the input requires grad, as an activation does.

    Raises:
        ValueError: for a device other than ``"cpu"``, ``"cuda"`` or ``"simulated"``.
    """
    if device not in ("cpu", "cuda", "simulated"):
        raise ValueError(f"device must be 'cpu', 'cuda' or 'simulated', got {device!r}")
    rules = contextlib.nullcontext()
    if device == "simulated":
        from .engine.cuda_rules import cuda_rules

        device, rules = "cpu", cuda_rules()
    if isinstance(model, str):
        from .models.presets import build_model

        name = model
        model = lambda: build_model(name, num_classes or 1000)  # noqa: E731
    with torch.device("meta"):
        module = model()
    storages: dict[int, tuple] = {}  # id -> (storage, kept alive so that ids stay unique; dtype; bytes)

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        storages.setdefault(id(st), (st, t.dtype, round_up(st.nbytes())))
        return t

    with rules, FakeTensorMode():
        module = module._apply(lambda t: torch.empty(t.shape, dtype=t.dtype, device=device))
        x = torch.randn(input_shape, device=device, requires_grad=input_requires_grad)
        with _autocast(device, autocast_dtype), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = module(x.clone() if input_requires_grad else x)
            if num_classes is not None:
                F.cross_entropy(out, torch.randint(0, num_classes, (input_shape[0],), device=device))
    totals: dict[torch.dtype, int] = {}
    for _, dtype, nbytes in storages.values():
        totals[dtype] = totals.get(dtype, 0) + nbytes
    return totals
