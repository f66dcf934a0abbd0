"""PyTorch FSDP2 on a fake process group: one rank's memory, measured.

Introduced in lesson 07 (when one GPU is not enough).  :func:`sharded_step`
runs training steps of a model wrapped with
``torch.distributed.fsdp.fully_shard`` (FSDP2, ZeRO stage 3: parameters,
gradients and optimizer states sharded) in *one* process, on a *fake process
group* of ``world_size`` ranks (:func:`fake_process_group`): this process
plays rank 0, every collective returns at once without moving data, and every
tensor has the shape it has on a real rank 0.  Under the simulated backend
(fake tensors, :class:`helpers.engine.counting.StorageTracker`) it gives the
bytes rank 0 of a real job would allocate, by category.  ZeRO's and
DeepSpeed's formulas are in :mod:`helpers.techniques.sharding`.

All sizes are bytes.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

from .config import StepConfig, check_int
from .engine.cuda_rules import SimulatedTracker
from .engine.meter import Meter
from .engine.trace import StepTracer
from .record import bytes_by_category, label_storages
from .step import StepRunner


#: The categories of a sharded step, in the order a storage is labelled
#: (a storage gets the first that applies): the three model states held by
#: this rank, then what FSDP allocates for its collectives, then the rest.
SHARDED_CATEGORIES = (
    "parameters", "gradients", "optimizer_states",
    "unsharded_parameters", "all_gather_buffers", "unsharded_gradients", "reduce_scatter_buffers",
    "other",
)


@contextlib.contextmanager
def fake_process_group(world_size: int, rank: int = 0, replicas: int = 1):
    """Make this one process rank ``rank`` of a fake ``world_size``-rank job; always tear it down.

    ``torch.distributed.init_process_group("fake", store=FakeStore(), ...)``
    (``torch/testing/_internal/distributed/fake_pg.py``): collectives return
    at once and move no data, but every tensor keeps the shape it has on a
    real rank.  Yields a ``DeviceMesh`` of CPU ranks, built here, outside any
    fake-tensor mode (its constructor reads tensor values), to pass to
    ``fully_shard(..., mesh=mesh)``: 1-dimensional, or, for ``replicas`` > 1,
    2-dimensional ``(replicas, world_size // replicas)`` with dimension names
    ``("replicate", "shard")``, the mesh of HSDP (``fully_shard``'s docstring:
    parameters sharded across the second dimension, replicated across the first).  On exit, even when the body
    raises, ``torch.distributed.destroy_process_group()`` runs, so that
    ``torch.distributed.is_initialized()`` is False afterwards.

    Raises:
        ValueError: for a world size below 1, a rank outside it, a number of
            replicas that does not divide the world size, or a process group
            already initialised in this process.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    check_int("world_size", world_size, 1)
    if check_int("rank", rank, 0) >= world_size:
        raise ValueError(f"rank must be below world_size ({world_size}), got {rank!r}")
    if world_size % check_int("replicas", replicas, 1):
        raise ValueError(f"replicas must divide world_size ({world_size}), got {replicas!r}")
    if dist.is_initialized():
        raise ValueError("a torch.distributed process group is already initialised in this process")
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        if replicas == 1:
            yield init_device_mesh("cpu", (world_size,))
        else:
            yield init_device_mesh("cpu", (replicas, world_size // replicas), mesh_dim_names=("replicate", "shard"))
    finally:
        dist.destroy_process_group()


class _FSDPTracker(SimulatedTracker):
    """A :class:`helpers.engine.cuda_rules.SimulatedTracker` that also remembers which storages FSDP2's own
    operators (``torch.ops.fsdp.*``, ``_fsdp_collectives.py``) wrote or made:

    * ``all_gather_copy_in``: its inputs (the shards, cast to ``param_dtype``
      under mixed precision) and the flat all-gather buffer;
    * ``split_with_sizes_copy``: the unsharded parameters it fills from that buffer;
    * ``chunk_cat``: its inputs (the unsharded gradients) and output (the flat
      reduce-scatter buffer).
    """

    def __init__(self):
        super().__init__(None)
        self.roles: dict[int, str] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if func.namespace == "fsdp" and not self.paused:
            if func._opname == "all_gather_copy_in":      # (inputs, output buffer, ...) -> (input view, output)
                self._label(args[0], "all_gather_buffers")
                self._label(out, "all_gather_buffers")
            elif func._opname == "split_with_sizes_copy":  # (buffer, sizes, *, out=unsharded parameters)
                self._label(kwargs.get("out"), "unsharded_parameters")
            elif func._opname == "chunk_cat":              # (unsharded gradients, ..., *, out=buffer)
                self._label(args[0], "unsharded_gradients")
                self._label(kwargs.get("out"), "reduce_scatter_buffers")
        return out

    def _label(self, tensors, role):
        if role is None or tensors is None:
            return
        for t in tensors if isinstance(tensors, (list, tuple)) else [tensors]:
            if isinstance(t, torch.Tensor):
                serial = self.track(t)
                if serial is not None:
                    self.roles.setdefault(serial, role)


@dataclass
class ShardedStep:
    """What one rank of an FSDP2 job allocates in a training step (simulated).

    Attributes:
        model: the model's name.
        world_size: ranks in the (fake) job; this process was rank 0.
        parameter_count: parameters of the whole model (unsharded).
        units: the FSDP units (each a ``fully_shard`` call), root last, with
            their parameter counts.
        parameters, gradients, optimizer_states: this rank's sharded model
            states at the optimizer step, in bytes (each storage rounded up to
            512 bytes, as the CUDA caching allocator does).
        peak_bytes: the highest allocated bytes of the traced step.
        peak_phase: ``"forward"``, ``"backward"`` or ``"optimizer.step"``.
        at_peak: bytes per category of :data:`SHARDED_CATEGORIES` at the peak.
        largest: for each category, the most bytes it held at any moment of the
            step (e.g. ``largest["unsharded_parameters"]``: the all-gathered
            parameters at their most).
        after_forward: bytes per category at the end of the forward pass
            (the loss computed; ``other`` holds the activations).
        timeline: after each allocation, free or resize of the traced step,
            ``(phase, allocated bytes, unsharded parameters' bytes, all-gather
            buffers' bytes)``.
    """

    model: str
    world_size: int
    parameter_count: int
    units: list[tuple[str, int]]
    parameters: int = 0
    gradients: int = 0
    optimizer_states: int = 0
    peak_bytes: int = 0
    peak_phase: str = ""
    at_peak: dict[str, int] = field(default_factory=dict)
    largest: dict[str, int] = field(default_factory=dict)
    after_forward: dict[str, int] = field(default_factory=dict)
    timeline: list[tuple[str, int, int, int]] = field(default_factory=list)

    @property
    def model_state_bytes(self) -> int:
        """Parameters + gradients + optimizer states held by this rank, in bytes."""
        return self.parameters + self.gradients + self.optimizer_states


def default_units(model: nn.Module) -> list[nn.Module]:
    """The submodules to wrap with their own ``fully_shard``, as the FSDP2
    examples do: a GPT's blocks (:class:`helpers.models.gpt.GPT`), a
    torchvision ResNet's residual blocks, a ``Sequential``'s children that hold
    parameters.  The root gets the rest (embeddings, stem, head).

    Raises:
        ValueError: for another kind of model (pass ``units=`` yourself).
    """
    from .models.gpt import GPT

    if isinstance(model, GPT):
        return list(model.blocks)
    if all(hasattr(model, f"layer{i}") for i in range(1, 5)):  # torchvision ResNet
        return [block for i in range(1, 5) for block in getattr(model, f"layer{i}")]
    if isinstance(model, nn.Sequential):
        return [m for m in model if any(True for _ in m.parameters())]
    raise ValueError(f"no default FSDP units for {type(model).__name__}; pass units= (a list of its submodules)")


def sharded_step(model="mlp", world_size: int = 2, batch_size: int = 8, *, seq_len: int | None = None,
                 image_size: int = 224, optimizer: str = "adam", reshard_after_forward: bool | None = None,
                 mixed_precision: bool = False, checkpoint: bool = False, units=None, rank: int = 0,
                 replicas: int = 1, prefetch: int | None = None) -> ShardedStep:
    """One steady-state training step of ``model`` under FSDP2 on rank 0 of ``world_size``, simulated.

    The model is built on the ``meta`` device, its FSDP units (``units``, by
    default :func:`default_units`, then the root) are wrapped with
    ``fully_shard`` on a :func:`fake_process_group`, and only then are its
    sharded parameters given (fake) storage, as a real job does for a model
    too large for one GPU.  A first step creates the optimizer states; the
    second is measured (forward, loss, backward, ``optimizer.step()``,
    ``zero_grad()``).

    Args:
        model: a name :func:`helpers.models.resolve_model` accepts (``"mlp"``,
            ``"resnet18"``, ``"gpt2"``, ...).
        world_size: ranks, >= 1.
        batch_size: samples per rank, >= 1.
        seq_len: tokens per sample for a GPT (default: its context length).
        image_size: height and width of image inputs.
        optimizer: one of :data:`helpers.config.OPTIMIZERS` (``foreach``).
        reshard_after_forward: ``fully_shard``'s option for every unit; None
            (its default) reshards every unit but the root after forward.
        mixed_precision: ``MixedPrecisionPolicy(param_dtype=torch.bfloat16,
            reduce_dtype=torch.float32)``: 16-bit all-gathers and compute,
            fp32 sharded parameters, gradients and optimizer states.
        checkpoint: activation checkpointing of every unit
            (``torch.utils.checkpoint``, non-reentrant), inside its ``fully_shard``.
        units: the submodules to shard separately (a function of the built
            model returning them, or None for :func:`default_units`); an
            entry may be a list of modules, sharded as one unit
            (``fully_shard([a, b])``), e.g. a GPT's embeddings and its head,
            which share the token embedding's weight.
        rank: the rank this process plays (rank 0 holds the largest shards).
        replicas: HSDP: a 2-dimensional mesh of ``replicas`` groups of
            ``world_size // replicas`` ranks; parameters are sharded within a
            group and replicated across groups (the gradients all-reduced
            across them).  1 (the default): plain FSDP over all ranks.
        prefetch: None for FSDP2's default (in backward, the next unit's
            all-gather issued while the current one computes); an integer k
            >= 1 makes every unit prefetch the next k units explicitly in
            forward and in backward (``set_modules_to_forward_prefetch``,
            ``set_modules_to_backward_prefetch``; k = 1 is the default overlap,
            more overlaps more and holds more all-gather buffers; FSDP2 has no
            public switch below one unit).

    Returns:
        A :class:`ShardedStep`.

    Raises:
        ValueError: for a bad count (world size, rank, replicas that do not
            divide the world size, prefetch), an unknown model or optimizer,
            or a process group already initialised.
    """
    from torch.distributed.tensor import DTensor

    check_int("world_size", world_size, 1)
    if prefetch is not None:
        check_int("prefetch", prefetch, 1)
    config = StepConfig(model=model, batch_size=batch_size, image_size=image_size, seq_len=seq_len,
                        optimizer=optimizer, device="simulated")
    tracker = _FSDPTracker()
    meter = Meter("simulated", tracker=tracker)
    # The runner builds the model (on meta); its sharded parameters get storage only
    # when it places the model, after fully_shard.
    runner = StepRunner(config, meter, place=lambda m: m._apply(lambda t: _empty_like_shard(t, meter.device, DTensor)))
    built = runner.model
    chosen = default_units(built) if units is None else list(units(built))
    result = ShardedStep(runner.name, world_size, sum(p.numel() for p in built.parameters()),
                         [(_unit_name(u), _unit_parameters(u)) for u in chosen])
    result.units.append(("root", result.parameter_count - sum(n for _, n in result.units)))
    with fake_process_group(world_size, rank, replicas) as mesh:
        _shard(built, chosen, mesh, reshard_after_forward, mixed_precision, checkpoint, prefetch)
        with meter:
            labels, events, peak_serials = _two_steps(runner, tracker)
    _measure(result, meter, labels, events, peak_serials)
    return result


def _two_steps(runner: StepRunner, tracker: "_FSDPTracker") -> tuple[dict[int, str], list, tuple[int, ...]]:
    """Inside the runner's meter: place the sharded model, run a first step (it creates the optimizer
    states), then the traced one.  Returns each storage's category of :data:`SHARDED_CATEGORIES`, the
    traced step's events and the storages alive at its peak."""
    meter = runner.meter
    net = runner.place()
    runner.run(free_batch=True)
    meter.reset_peak()
    marks = StepTracer(meter, net)  # not entered: the step's own events, no module hooks
    roles = runner.run(marks, free_batch=True)
    for serial in _unsharded_serials(net, meter):  # also at world size 1, where FSDP copies, not gathers
        tracker.roles[serial] = "unsharded_parameters"
    known = {"parameters": {meter.serial_of(p) for p in net.parameters()}, "gradients": roles.gradients,
             "optimizer_states": roles.optimizer_states}
    for role in SHARDED_CATEGORIES[3:-1]:
        known[role] = {serial for serial, r in tracker.roles.items() if r == role}
    labels = label_storages({serial: nbytes for serial, (nbytes, _, _) in meter.storages().items()}, known)
    return labels, marks.events, meter.peak_serials()


def _shard(model: nn.Module, units: list, mesh, reshard_after_forward: bool | None, mixed_precision: bool,
           checkpoint: bool, prefetch: int | None) -> None:
    """``fully_shard`` each unit, then the root, on ``mesh`` (see :func:`sharded_step` for the options)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if checkpoint:
        for unit in units:
            for module in unit if isinstance(unit, (list, tuple)) else [unit]:
                _checkpoint_forward(module)

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
        if mixed_precision else MixedPrecisionPolicy()
    options = dict(mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=policy)
    wrapped = [fully_shard(unit, **options) for unit in units]
    wrapped = [w[0] if isinstance(w, list) else w for w in wrapped]  # a grouped unit: one state, any module
    fully_shard(model, **options)
    if prefetch is not None:  # in forward order: each unit prefetches the next k, and in backward the previous k
        for i, unit in enumerate(wrapped):
            unit.set_modules_to_forward_prefetch(wrapped[i + 1:i + 1 + prefetch])
            unit.set_modules_to_backward_prefetch(wrapped[max(0, i - prefetch):i][::-1])


#: The phase of the traced step that begins at each of the runner's step events.
_PHASE_FROM = {"model": "forward", "loss": "backward", "backward": "optimizer.step"}


def _measure(result: ShardedStep, meter: Meter, labels: dict[int, str], events: list, peak_serials) -> None:
    """Fill ``result``'s figures from the traced step: its step events, the meter's log and sizes, each
    storage's category (``labels``)."""
    sizes = {serial: nbytes for serial, (nbytes, _, _) in meter.storages().items()}
    at = {e.phase: e for e in events}
    at_step = bytes_by_category(at["optimizer.step"].live, sizes, labels, SHARDED_CATEGORIES)
    result.parameters, result.gradients, result.optimizer_states = (
        at_step["parameters"], at_step["gradients"], at_step["optimizer_states"])
    result.peak_bytes = meter.peak()
    result.at_peak = bytes_by_category(peak_serials, sizes, labels, SHARDED_CATEGORIES)
    result.after_forward = bytes_by_category(at["loss"].live, sizes, labels, SHARDED_CATEGORIES)
    # Replay the log: every category's largest total in the traced step, and the phase of the peak.
    marks = [(e.log_position, _PHASE_FROM[e.phase]) for e in events if e.phase in _PHASE_FROM]
    totals = dict.fromkeys(SHARDED_CATEGORIES, 0)
    largest = dict.fromkeys(SHARDED_CATEGORIES, 0)
    best = -1
    for i, entry in enumerate(meter.allocation_log()):
        totals[labels[entry.serial]] += entry.delta
        if i < marks[0][0]:
            continue
        running = sum(totals.values())
        phase = [p for position, p in marks if position <= i][-1]
        result.timeline.append((phase, running, totals["unsharded_parameters"], totals["all_gather_buffers"]))
        if running > best:
            best, result.peak_phase = running, phase
        for k in largest:
            largest[k] = max(largest[k], totals[k])
    result.largest = largest


def _unit_name(unit) -> str:
    """A unit's class name, or the names of a grouped unit's modules joined by '+'."""
    if isinstance(unit, (list, tuple)):
        return "+".join(type(m).__name__ for m in unit)
    return type(unit).__name__


def _unit_parameters(unit) -> int:
    """Parameters of a unit (a module or a list of modules), each shared tensor once."""
    modules = unit if isinstance(unit, (list, tuple)) else [unit]
    return sum({id(p): p.numel() for m in modules for p in m.parameters()}.values())


def _unsharded_serials(model: nn.Module, meter: Meter) -> set[int]:
    """Serials of the storages FSDP2 all-gathers each unit's parameters into
    (``FSDPParam.all_gather_outputs``; resized to 0 bytes while resharded)."""
    from torch.distributed.fsdp import FSDPModule

    serials = set()
    for module in model.modules():
        group = module._get_fsdp_state()._fsdp_param_group if isinstance(module, FSDPModule) else None
        for fsdp_param in group.fsdp_params if group is not None else ():
            for t in getattr(fsdp_param, "all_gather_outputs", ()):
                serial = meter.serial_of(t)
                if serial is not None:
                    serials.add(serial)
    return serials


def _empty_like_shard(t: torch.Tensor, device: torch.device, dtensor_type) -> torch.Tensor:
    """Fake storage for a (sharded) parameter or buffer: for a ``DTensor``, its local shard only."""
    if isinstance(t, dtensor_type):
        local = torch.empty(t._local_tensor.shape, dtype=t.dtype, device=device)
        return dtensor_type.from_local(local, t.device_mesh, t.placements, run_check=False,
                                       shape=t.shape, stride=t.stride())
    return torch.empty(t.shape, dtype=t.dtype, device=device)


def _checkpoint_forward(module: nn.Module) -> None:
    """Run ``module``'s forward under non-reentrant activation checkpointing."""
    from torch.utils.checkpoint import checkpoint

    inner = module.forward

    def forward(*args, **kwargs):
        return checkpoint(inner, *args, use_reentrant=False, **kwargs)

    module.forward = forward
