"""PyTorch FSDP2 on a fake process group: one rank's memory, measured (lesson 07).  All sizes are bytes.

:func:`sharded_step` runs steps of a model wrapped with ``torch.distributed.fsdp.fully_shard`` (ZeRO stage 3) as rank 0
of a :func:`fake_process_group`: collectives move no data, every tensor has its real rank-0 shape, and the simulated
backend counts the bytes by category.  ZeRO's and DeepSpeed's formulas are in :mod:`helpers.sharding`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

from .config import StepConfig, check_int
from .engine.simulated import SimulatedTracker
from .engine.meter import Meter
from .engine.trace import StepTracer
from .record import bytes_by_category, label_storages
from .step import StepRunner


#: The categories of a sharded step, in the order a storage is labelled (it gets the first that applies): the three
#: model states held by this rank, then what FSDP allocates for its collectives, then the rest.
SHARDED_CATEGORIES = (
    "parameters", "gradients", "optimizer_states",
    "unsharded_parameters", "all_gather_buffers", "unsharded_gradients", "reduce_scatter_buffers",
    "other",
)


@contextlib.contextmanager
def fake_process_group(world_size: int, rank: int = 0, replicas: int = 1):
    """Make this process rank ``rank`` of a fake ``world_size``-rank job (``init_process_group("fake",
    store=FakeStore())``, ``torch/testing/_internal/distributed/fake_pg.py``), torn down on exit, even on error.
    Yields a CPU ``DeviceMesh`` (made outside any fake mode) for ``fully_shard(mesh=...)``: 1-D, or for ``replicas > 1``
    the HSDP mesh ``(replicas, world_size // replicas)`` named ``("replicate", "shard")``.

    Raises:
        ValueError: for a world size below 1, a rank outside it, replicas that do not divide it, or a process group
            already initialised.
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
    """A :class:`helpers.engine.simulated.SimulatedTracker` remembering what FSDP2's operators (``torch.ops.fsdp.*``,
    ``_fsdp_collectives.py``) made: ``all_gather_copy_in``'s inputs and flat buffer, ``split_with_sizes_copy``'s
    unsharded parameters, ``chunk_cat``'s unsharded gradients and reduce-scatter buffer."""

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
    """What one rank of an FSDP2 job allocates in a training step (simulated).  Bytes.

    Attributes:
        model, world_size: the model's name; the ranks of the (fake) job (this process was rank 0).
        parameter_count, units: parameters of the whole model (unsharded); the FSDP units, root last, with their counts.
        parameters, gradients, optimizer_states: this rank's sharded model states at the optimizer step (each storage
            rounded up to 512).
        peak_bytes: the highest allocated bytes of the traced step.
        peak_phase: ``"forward"``, ``"backward"`` or ``"optimizer.step"``.
        at_peak: bytes per category of :data:`SHARDED_CATEGORIES` at the peak.
        largest, after_forward: each category's most bytes at any moment of the step; its bytes at the end of forward.
        timeline: after each log entry, ``(phase, allocated, unsharded parameters' bytes, all-gather buffers' bytes)``.
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
    """The submodules that get their own ``fully_shard``, as FSDP2's examples do (the root gets the rest): a GPT's
    blocks, a ResNet's residual blocks, a ``Sequential``'s children with parameters.

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
                 replicas: int = 1, prefetch: int | None = None, first_step: str = "primed") -> ShardedStep:
    """One steady-state training step of ``model`` under FSDP2 on rank 0 of ``world_size``, simulated.

    Built on ``meta``, wrapped with ``fully_shard`` (``units``, then the root), then its shards given fake storage, as
    a real job does; what a first training step leaves behind is made (``first_step``), then a step is measured.

    Args:
        model: a name :func:`helpers.models.resolve_model` accepts.
        world_size, batch_size: ranks, and samples per rank (each >= 1).
        seq_len, image_size: tokens per sample for a GPT (default: its context); height and width of image inputs.
        optimizer, reshard_after_forward: one of :data:`helpers.config.OPTIMIZERS` (``foreach``); ``fully_shard``'s
            option (None: its default).
        mixed_precision: ``MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)``.
        checkpoint: non-reentrant checkpointing of every unit, inside its ``fully_shard``.
        units: built model -> its units (None: :func:`default_units`); an entry may be a list, sharded as one unit.
        rank, replicas: the rank this process plays; HSDP with ``replicas`` groups (1: plain FSDP).
        prefetch: None for FSDP2's default; k >= 1 prefetches the next k units in forward and backward
            (``set_modules_to_forward_prefetch``, ``set_modules_to_backward_prefetch``).
        first_step: how the state the measured step starts from is made: ``"trained"``, a whole training step (forward,
            backward, optimizer step, ``zero_grad``); ``"primed"`` (the default), the same state without the model's
            forward and backward (:func:`_prime`; about 1 s less of CPU per call for GPT-2 124M).  Every field of the
            result is the same both ways for every model and option lesson 07 and ``tests/test_sharding.py`` use
            (checked there on small configurations); a model whose forward makes tensors that outlive the step, or with
            parameters that get no gradient, needs ``"trained"``.

    Raises:
        ValueError: for a bad count (world size, rank, replicas, prefetch), an unknown model, optimizer or first step,
            or a process group already initialised.
    """
    from torch.distributed.tensor import DTensor

    check_int("world_size", world_size, 1)
    if prefetch is not None:
        check_int("prefetch", prefetch, 1)
    if first_step not in ("primed", "trained"):
        raise ValueError(f"first_step must be 'primed' or 'trained', got {first_step!r}")
    config = StepConfig(model=model, batch_size=batch_size, image_size=image_size, seq_len=seq_len,
                        optimizer=optimizer, device="simulated")
    tracker = _FSDPTracker()
    meter = Meter("simulated", tracker=tracker)
    # The runner builds the model on meta; the sharded parameters get storage when it places it, after fully_shard.
    runner = StepRunner(config, meter, place=lambda m: m._apply(lambda t: _empty_like_shard(t, meter.device, DTensor)))
    built = runner.model
    chosen = default_units(built) if units is None else list(units(built))
    result = ShardedStep(runner.name, world_size, sum(p.numel() for p in built.parameters()),
                         [(_unit_name(u), _unit_parameters(u)) for u in chosen])
    result.units.append(("root", result.parameter_count - sum(n for _, n in result.units)))
    with fake_process_group(world_size, rank, replicas) as mesh:
        _shard(built, chosen, mesh, reshard_after_forward, mixed_precision, checkpoint, prefetch)
        with meter:
            labels, events, peak_serials = _two_steps(runner, tracker, first_step == "primed")
    _measure(result, meter, labels, events, peak_serials)
    return result


def _two_steps(runner: StepRunner, tracker: "_FSDPTracker", primed: bool) -> tuple[dict[int, str], list,
                                                                                  tuple[int, ...]]:
    """In the meter: place the sharded model, make what a first step leaves (:func:`_prime` if ``primed``, else a
    whole first step), then run the traced step: (labels, events, peak serials)."""
    meter = runner.meter
    net = runner.place()
    if primed:
        _prime(runner, net)
    else:
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


def _prime(runner: StepRunner, net: nn.Module) -> None:
    """What a first training step leaves on the device for the next, without the model's forward and backward (most of
    a step's operators): FSDP2's lazy initialisation, which the root's first forward runs (``FSDPState._lazy_init``);
    each unit gathered once and resharded (``FSDPModule.unshard``, ``reshard``), which makes the all-gather outputs and
    unsharded parameters that FSDP2 keeps, their storage freed, from then on; then one optimizer step on zero gradients
    of the sharded parameters' shapes, which makes the optimizer's states (``zeros_like`` of each parameter, whatever its
    gradient holds), and ``zero_grad``, which drops the gradients as after a real step.  The collectives' buffers and
    the activations of a real first step are all freed by its end.  ``sharded_step(..., first_step="trained")`` runs the
    real step instead; ``tests/test_sharding.py`` checks that both give the same measured step."""
    from torch.distributed.fsdp import FSDPModule

    net._get_fsdp_state()._lazy_init()
    seen = set()
    for module in net.modules():
        state = module._get_fsdp_state() if isinstance(module, FSDPModule) else None
        if state is not None and id(state) not in seen:  # a grouped unit: one state for its modules
            seen.add(id(state))
            module.unshard()
            module.reshard()
    for p in net.parameters():
        if p.requires_grad:
            p.grad = torch.zeros_like(p)
    runner.step()
    runner.zero_grad()


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
    """Fill ``result``'s figures from the traced step's events, the meter's log and ``labels``."""
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
    """Serials of FSDP2's all-gather outputs (``FSDPParam.all_gather_outputs``; 0 bytes while resharded)."""
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
