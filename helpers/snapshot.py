"""A real GPU's memory snapshot explained: the peak, what was live at it and why, reserved memory, segments (lesson 06).

A snapshot is the dictionary ``torch.cuda.memory._snapshot()`` returns (``torch.cuda.memory._dump_snapshot(path)``
pickles it; the format https://pytorch.org/memory_viz reads; PyTorch's "Understanding CUDA Memory Usage").  It holds
``segments``, the allocator's segments when it was taken, each with its blocks, and, if
``torch.cuda.memory._record_memory_history()`` ran before, ``device_traces``: per device, every ``alloc``,
``free_requested``, ``free_completed``, ``segment_alloc`` and ``segment_free`` (``segment_map`` and ``segment_unmap``
with expandable segments) with its address, size, stream, time and Python frames (C++ frames too with
``stacks="all"``), innermost first.  In ``c10/cuda/CUDACachingAllocator.cpp`` an ``alloc`` entry's size is the
tensor's request and ``memory_allocated()`` falls when a free is requested, so the tensors live after each entry
are known exactly from the trace.  The blocks behind them (requests rounded up, and lesson 06's unsplit rests) and
the free space in the segments come from replaying the trace through the course's model of that allocator
(:mod:`helpers.allocator`), which needs the recording to begin with an empty cache (``torch.cuda.empty_cache()``) or
one whose blocks all stay live.

What a block is for comes from the stack that allocated it, as Mosaic (facebookresearch/mosaic) sorts a snapshot
(:func:`category_of`).  A stack cannot tell everything: the autograd engine's thread (the backward pass) has no
Python frames, and a block allocated before the recording has no frames at all.  Given the same step simulated
(``step=``), :func:`align` pairs the trace's allocations with the simulation's, labels each pair with the
simulation's category and moment, and lists what differs.
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from .alignment import pair
from .allocator import replay, round_size
from .gpus import CUBLAS_WORKSPACE_DEFAULT, CUBLAS_WORKSPACE_HOPPER
from .record import CATEGORIES, StepProfile
from .snapshot_file import MAX_SNAPSHOT_BYTES, SnapshotError, load_snapshot  # noqa: F401  (read here)
from .units import MiB, fmt_mib

#: What a live block can be: the course's categories, cuBLAS's workspaces, and what was allocated before the
#: recording began (no frames: nothing says what it is).
SNAPSHOT_CATEGORIES = (*CATEGORIES, "cublas_workspaces", "cudnn_workspaces", "before_recording")
#: The ATen functions that ask the allocator for a cuDNN convolution's workspace themselves (``run_conv_plan``,
#: ``run_single_conv`` in ``aten/src/ATen/native/cudnn/Conv_v8.cpp``; ``try_plans`` and ``try_configs`` while
#: ``cudnn.benchmark`` searches): the innermost ``at::native::`` frame of a workspace (a convolution's output is made
#: in the function of its pass, ``cudnn_convolution_forward`` and the like).
#: Categories a stack gives for certain (C++ frames): such a block is never paired with a simulated tensor.
WORKSPACES = ("cublas_workspaces", "cudnn_workspaces")
CUDNN_WORKSPACE_FRAMES = ("run_conv_plan", "run_single_conv", "try_plans", "try_configs")
#: Functions of a model's placement, loading or quantization (torchao's ``to_nf4``; bitsandbytes' ``quantize_4bit``
#: and ``Params4bit._quantize``): what they allocate are parameters (and buffers).
PLACEMENT = ("_apply", "to_empty", "_load_from_state_dict", "load_state_dict", "set_module_tensor_to_device",
             "_load_state_dict_into_meta_model", "from_pretrained", "to_nf4", "quantize_4bit", "_quantize")


#: Frames of the machinery between the code that asked for a tensor and the allocation, which say nothing of what it
#: is for: the course's own engine (a step profiled with ``device="cuda"`` runs under its dispatch mode,
#: ``helpers/engine/counting.py``), PyTorch's dispatch to a Python mode (``torch/_ops.py``,
#: ``torch/utils/_python_dispatch.py``) and the wrappers of ``torch._dynamo``'s ``disable``.  Skipped by
#: :func:`category_of` and :func:`where`: with them, every allocation of the shipped snapshots had the tracker's
#: frame, and the backward pass's thread seemed to run Python.
MACHINERY = ("/helpers/engine/", "/torch/_ops.py", "/torch/utils/_python_dispatch.py", "/torch/_dynamo/",
             "/torch/_compile.py")


def python_frames(frames: list[dict]) -> list[dict]:
    """The Python frames of a stack (innermost first), less those of :data:`MACHINERY`."""
    return [f for f in frames if f.get("filename", "").endswith(".py")
            and not any(part in f["filename"].replace("\\", "/") for part in MACHINERY)]


def pick_trace(snapshot: dict, device: int | None = None) -> tuple[int, list[dict]]:
    """``(device, its trace)``: the one device with a recorded history, or ``device``.

    Raises:
        SnapshotError: when no device has a history (``_record_memory_history()`` was not called), when several have
            one and ``device`` is None, or when ``device`` has none.
    """
    recorded = [d for d, trace in enumerate(snapshot["device_traces"]) if trace]
    if not recorded:
        raise SnapshotError("the snapshot has no history: call torch.cuda.memory._record_memory_history() before the "
                            "step, and dump the snapshot before recording stops")
    if device is None and len(recorded) > 1:
        raise SnapshotError(f"the snapshot has histories for devices {recorded}: say which (device=, --cuda-device)")
    device = recorded[0] if device is None else device
    if device not in recorded:
        raise SnapshotError(f"the snapshot has no history for device {device}; it has {recorded}")
    return device, snapshot["device_traces"][device]


def category_of(frames: list[dict], live_at_optimizer: bool, before_forward: bool) -> str:
    """The category of a block from the frames that allocated it (innermost first): the first rule that holds.

    1. a C++ frame of cuBLAS's workspace (``getCUDABlasLtWorkspace``, ``getCurrentCUDABlasHandle``):
       ``cublas_workspaces``; the innermost ATen frame one of :data:`CUDNN_WORKSPACE_FRAMES`: ``cudnn_workspaces``;
    2. in ``torch/optim/``: ``optimizer_states`` in ``_init_group`` (where optimizers make their states lazily), else
       ``other`` (the optimizer's temporaries); in ``zero_grad`` or ``torch/amp/``: ``other``;
    3. in a model's placement, loading or quantization (:data:`PLACEMENT`): ``parameters``;
    4. no Python frame but :data:`MACHINERY`'s (the autograd engine's thread: the backward pass): ``gradients`` when
       still live at the optimizer's next allocation, or at the trace's end (``live_at_optimizer``), else ``other``
       (gradients of activations, temporaries); in ``torch/autograd/`` on the caller's thread: ``other``;
    5. in ``torch/utils/checkpoint.py`` (a recomputed forward), a ``forward`` or ``torch/nn/functional.py``:
       ``activations`` (outputs kept for backward, and the forward's temporaries);
    6. else ``input`` before the first forward (``before_forward``: the batch), ``other`` after.
    """
    python = [(f["filename"], f.get("name", "")) for f in python_frames(frames)]
    if any("BlasLtWorkspace" in f.get("name", "") or "getCurrentCUDABlasHandle" in f.get("name", "") for f in frames):
        return "cublas_workspaces"
    aten = next((f["name"] for f in frames if f.get("name", "").startswith("at::native::")), "")
    if any(f"::{name}(" in aten for name in CUDNN_WORKSPACE_FRAMES):
        return "cudnn_workspaces"
    if any("/torch/optim/" in f for f, _ in python):
        return "optimizer_states" if any(n == "_init_group" for _, n in python) else "other"
    if any(n == "zero_grad" or "/torch/amp/" in f for f, n in python):
        return "other"
    if any(n in PLACEMENT for _, n in python):
        return "parameters"
    if not python:
        return "gradients" if live_at_optimizer else "other"
    if any("/torch/autograd/" in f for f, _ in python):
        return "other"
    if any(f.endswith(("torch/utils/checkpoint.py", "torch/nn/functional.py")) or n == "forward" for f, n in python):
        return "activations"
    return "input" if before_forward else "other"


def where(frames: list[dict]) -> str:
    """A stack in one line: its innermost Python frame and the innermost one outside ``torch`` and other installed
    packages (the caller's code), :data:`MACHINERY`'s skipped, each ``file:line function``, after the innermost three
    ATen functions when C++ frames were recorded (``[gpu_reduce_kernel < structured_sum_out::impl]``); or what it lacks."""
    native = [re.split(r"[<(]", f["name"].split("at::native::", 1)[1])[0] for f in frames
              if "at::native::" in f.get("name", "")]
    cpp = f"[{' < '.join(native[:3])}] " if native else ""
    python = python_frames(frames)
    if not python:
        return cpp.strip() if native else "(no Python frames: the backward pass's thread)"

    def one(f: dict) -> str:
        return f"{f['filename'].rsplit('/', 1)[-1]}:{f.get('line', '?')} {f.get('name', '?')}"

    own = next((f for f in python if "site-packages" not in f["filename"] and "/torch/" not in f["filename"]), None)
    return cpp + one(python[0]) + ("" if own is None or own is python[0] else f" <- {one(own)}")


@dataclass
class Block:
    """One tensor's block: ``address``, ``size`` (bytes requested), the trace entries that ``allocated`` and ``freed``
    it (None: before the recording, or not by its end), its ``frames``, ``category`` (:data:`SNAPSHOT_CATEGORIES`)
    and, when aligned with a simulated step, ``twin`` (the index in its allocation log) and ``moment`` (its event)."""

    address: int
    size: int
    allocated: int | None
    freed: int | None
    frames: list[dict] = field(default_factory=list, repr=False)
    category: str = "other"
    twin: int | None = None
    moment: str | None = None

    @property
    def place(self) -> str:
        """Where it comes from in words: the simulated moment when aligned, else its stack (:func:`where`)."""
        if self.twin is not None:
            return f"simulated: {self.moment}"
        return where(self.frames) if self.frames or self.allocated is not None else "(allocated before the recording)"


def _blocks(trace: list[dict], segments: list[dict]) -> list[Block]:
    """Every tensor of the trace, and those allocated before it that it frees or that are live at its end, each
    categorized by :func:`category_of`."""
    live: dict[int, Block] = {}
    done: list[Block] = []
    for i, e in enumerate(trace):
        if e["action"] == "alloc":
            live[e["addr"]] = Block(e["addr"], e["size"], i, None, e.get("frames") or [])
        elif e["action"] == "free_requested":
            block = live.pop(e["addr"], None) or Block(e["addr"], e["size"], None, None)
            block.freed = i
            done.append(block)
    done += [Block(b["address"], b.get("requested_size", b["size"]), None, None, b.get("frames") or [])
             for s in segments for b in s["blocks"] if b["state"] == "active_allocated" and b["address"] not in live]
    blocks = done + list(live.values())
    steps = [b.allocated for b in blocks if b.allocated is not None and b.frames and
             any("/torch/optim/" in f.get("filename", "") for f in b.frames)]
    forward = min((b.allocated for b in blocks if b.allocated is not None and
                   category_of(b.frames, False, False) == "activations"), default=len(trace))
    steps.sort()
    for b in blocks:
        if b.allocated is None and not b.frames:
            b.category = "before_recording"
            continue
        k = bisect.bisect_right(steps, -1 if b.allocated is None else b.allocated)
        live_then = b.freed is None or (k < len(steps) and b.freed > steps[k])
        b.category = category_of(b.frames, live_then, (b.allocated or 0) < forward)
    return blocks


def _live(blocks: list[Block], after: int) -> list[Block]:
    """The blocks live after trace entry ``after`` (-1: when the recording began)."""
    return [b for b in blocks if (b.allocated is None or b.allocated <= after) and (b.freed is None or b.freed > after)]


def _size(nbytes: int) -> str:
    """Bytes for the report: MiB with one decimal, or bytes below a tenth of a MiB (cuDNN attention's 8-byte seed
    and offset)."""
    return fmt_mib(nbytes) if abs(nbytes) >= MiB // 10 or nbytes == 0 else f"{nbytes:,} B"


def by_category(blocks, size=lambda b: b.size) -> dict[str, int]:
    """Bytes of ``blocks`` per category of :data:`SNAPSHOT_CATEGORIES` (each block's ``size(block)``)."""
    out = dict.fromkeys(SNAPSHOT_CATEGORIES, 0)
    for b in blocks:
        out[b.category] += size(b)
    return out


@dataclass
class Twin:
    """A snapshot aligned with the same step simulated (:func:`align`).  Bytes throughout.

    Attributes:
        profile: the simulated step; ``aligned``: how many of the trace's allocations have a simulated twin.
        extra: the trace's allocations without one (what the GPU allocated and the simulation did not: cuBLAS's
            workspaces, kernels' own buffers), in trace order; ``missing``: indices in ``profile.allocation_log`` of
            simulated allocations without one.
        measured: the trace entry of the first allocation aligned with the simulated step itself (after its
            placement and, in a steady state, its first step): the part of the trace compared.
        peak_at, peak_gpu, categories_gpu: in ``trace[measured:]``, the entry after which the live tensors, each
            rounded by :func:`helpers.allocator.round_size` as the simulation rounds them, are highest; that sum; its
            bytes per category.
        reserved_gpu, reserved_simulated: the trace's highest reserved memory, and the simulated step's replayed
            through the allocator model.
    """

    profile: StepProfile
    aligned: int
    extra: list[Block]
    missing: list[int]
    measured: int
    peak_at: int
    peak_gpu: int
    categories_gpu: dict[str, int]
    reserved_gpu: int
    reserved_simulated: int

    def groups(self) -> list[tuple[str, int, int]]:
        """The GPU-only allocations grouped by where they were made (the stack, and the simulated moment of the
        aligned allocation before each, block numbers as ``*``): ``(where, count, bytes)``, most bytes first."""
        groups: dict[str, list[int]] = defaultdict(list)
        for b in self.extra:
            groups[f"{where(b.frames)}, near {b.moment}"].append(b.size)
        return sorted(((k, len(v), sum(v)) for k, v in groups.items()), key=lambda g: -g[2])

    def lines(self, top: int = 4) -> list[str]:
        """The comparison, each difference a named line."""
        log, sim = self.profile.allocation_log, self.profile.categories
        out = [f"beside the same step simulated ({self.profile.model}): {self.aligned:,} of "
               f"{self.aligned + len(self.extra):,} allocations aligned and labelled with the simulation's category",
               f"  peak of tensors from trace entry {self.measured:,} (the simulated step's part), rounded to 512 B: "
               f"GPU {fmt_mib(self.peak_gpu)}, simulated {fmt_mib(self.profile.peak_allocated_bytes)}, difference "
               f"{fmt_mib(self.peak_gpu - self.profile.peak_allocated_bytes)}"]
        out += [f"    {c.replace('_', ' '):<17} GPU {_size(n):>14}, simulated {_size(sim.get(c, 0)):>14}"
                for c, n in self.categories_gpu.items() if n or sim.get(c, 0)]
        out += [f"  peak reserved: GPU {fmt_mib(self.reserved_gpu)}, simulated {fmt_mib(self.reserved_simulated)}, "
                f"difference {fmt_mib(self.reserved_gpu - self.reserved_simulated)}",
                f"  allocated on the GPU, not simulated: {len(self.extra):,} allocations, "
                f"{fmt_mib(sum(b.size for b in self.extra))}"]
        out += [f"    {n:>5} x {fmt_mib(nbytes):>12}  {place}" for place, n, nbytes in self.groups()[:top]]
        return out + [f"  simulated, not on the GPU: {len(self.missing):,} allocations, "
                      f"{fmt_mib(sum(log[i].nbytes for i in self.missing))} (transients, each named in --json)"]

    def to_dict(self) -> dict:
        """The comparison as JSON-ready data."""
        log = self.profile.allocation_log
        return {"model": self.profile.model, "aligned": self.aligned, "measured_from_entry": self.measured,
                "peak_entry": self.peak_at,
                "peak_tensor_bytes": {"gpu": self.peak_gpu, "simulated": self.profile.peak_allocated_bytes},
                "categories_at_peak_bytes": {"gpu": self.categories_gpu, "simulated": self.profile.categories},
                "peak_reserved_bytes": {"gpu": self.reserved_gpu, "simulated": self.reserved_simulated},
                "gpu_only": [{"where": w, "count": n, "bytes": nbytes} for w, n, nbytes in self.groups()],
                "simulated_only": [{"bytes": log[i].nbytes, "category": log[i].category, "log_index": i}
                                   for i in self.missing]}


def _log_lifetimes(log: list, theirs: list[int]) -> list[tuple[int, int | None]]:
    """Each simulated allocation's log index, and that of its free (None: kept)."""
    freed_at = {a.serial: k for k, a in enumerate(log) if a.kind == "free"}
    return [(i, freed_at.get(log[i].serial)) for i in theirs]


def align(report: SnapshotReport, profile: StepProfile) -> Twin:
    """Align the trace's allocations with the simulated step's, label each pair with the simulation's category and
    moment, and recount the report's categories.

    The rules.  Each side is a sequence of allocations, each a size (the trace's requests rounded by
    :func:`helpers.allocator.round_size`; the log's bytes) and whether it is kept to the end, paired by
    :func:`helpers.alignment.pair`.  Kept means, on each side, still live at that side's last allocation: after it come
    only frees, and the two sides free different things there (the harness drops the model and optimizer on the GPU;
    the simulated step ends with ``zero_grad``), so a momentum buffer is kept on both.  The log's
    zero-byte allocations (an empty tensor) are left out: the caching allocator hands out no block for them and traces
    nothing (``allocate`` calls ``malloc`` only for a non-zero size, ``c10/cuda/CUDACachingAllocator.cpp``).
    A pair takes the simulation's category, except before the simulated step itself (placement, a steady state's first
    step), where the simulation's "other" keeps the stack's category: the simulation labels only the storages its
    measured step uses.  The rest is reported, not guessed: a size that differs is one line on each side.  One
    exception: an allocation left over, kept to the end, of a cuBLAS workspace's size
    (:data:`helpers.gpus.CUBLAS_WORKSPACE_HOPPER`, ``CUBLAS_WORKSPACE_DEFAULT``) is labelled ``cublas_workspaces``.
    """
    log, events = profile.allocation_log, profile.events
    ours = sorted((b for b in report.blocks if b.allocated is not None), key=lambda b: b.allocated)
    theirs = [i for i, a in enumerate(log) if a.kind == "alloc" and a.nbytes > 0]
    last_sim = max(theirs, default=-1)
    kept = {a.serial for a in log if a.kind == "alloc"} - {a.serial for k, a in enumerate(log[:last_sim])
                                                           if a.kind == "free"}
    last = max((b.allocated for b in ours), default=-1)  # after it, only frees: the step's teardown
    keys_gpu = [(round_size(b.size), b.freed is None or b.freed > last) + (("workspace",) if b.category in WORKSPACES
                                                                             else ()) for b in ours]
    keys_sim = [(log[i].nbytes, log[i].serial in kept) for i in theirs]
    pairs = pair(keys_gpu, keys_sim, [(b.allocated, b.freed) for b in ours], _log_lifetimes(log, theirs))
    moment = "placement, or a steady state's first step"
    for i, b in enumerate(ours):
        if i in pairs:
            entry = log[theirs[pairs[i]]]
            b.twin = theirs[pairs[i]]
            in_step = b.twin >= events[0].log_position  # before it, the simulation labels only what the step keeps
            b.category = entry.category if in_step or entry.category != "other" else b.category
            b.moment = moment = events[min(entry.event, len(events) - 1)].label if in_step else moment
        else:
            b.moment = re.sub(r"\.\d+\.", ".*.", moment)
            if b.freed is None and b.size in (CUBLAS_WORKSPACE_HOPPER, CUBLAS_WORKSPACE_DEFAULT):
                b.category = "cublas_workspaces"
    report.by_category = by_category(report.live_at_peak)
    measured = min((b.allocated for b in ours if b.twin is not None and b.twin >= events[0].log_position), default=0)
    sign = {"alloc": 1, "free_requested": -1}
    rounded = [round_size(e["size"]) * sign.get(e["action"], 0) for e in report.trace]
    level, peak, at = sum(round_size(b.size) for b in _live(report.blocks, measured - 1)), -1, measured
    for i in range(measured, len(rounded)):
        level += rounded[i]
        peak, at = (level, i) if level > peak else (peak, at)
    missing = sorted(theirs[j] for j in set(range(len(theirs))) - set(pairs.values()))
    return Twin(profile, len(pairs), [b for i, b in enumerate(ours) if i not in pairs], missing, measured, at, peak,
                by_category(_live(report.blocks, at), lambda b: round_size(b.size)), max(report.reserved),
                replay(log).peak_reserved)


@dataclass
class SnapshotReport:
    """What :func:`explain_snapshot` found.  Bytes throughout; indices are positions in the device's trace.

    Attributes:
        device, entries: the device and the length of its trace.
        tensors: bytes of live tensors (their requests) after each trace entry.
        reserved: ``memory_reserved()`` after each entry (the segments held from the driver).
        peak, peak_bytes: the first entry after which ``tensors`` is highest, and that height.
        live_at_peak: the blocks live after ``peak``, largest first; ``by_category``: their bytes per
            :data:`SNAPSHOT_CATEGORIES`.
        allocated: ``memory_allocated()`` after each entry (blocks: requests rounded up, unsplit rests), when the
            allocator model replays the trace to the snapshot's own end; else None and ``notes`` say why.
        largest_free, free_in_segments, segments_at_peak: at ``peak``, from that replay (None without it).
        replayed_peak_reserved: the highest ``memory_reserved()`` of that replay (None without it).
        twin: the :class:`Twin` when a simulated step was given.
        notes: what the snapshot cannot tell, in sentences.
        blocks, trace, segments: every :class:`Block`, the device's trace, its segments at the end.
    """

    device: int
    entries: int
    tensors: list[int]
    reserved: list[int]
    peak: int
    peak_bytes: int
    live_at_peak: list[Block]
    by_category: dict[str, int]
    allocated: list[int] | None = None
    largest_free: int | None = None
    free_in_segments: int | None = None
    segments_at_peak: int | None = None
    replayed_peak_reserved: int | None = None
    twin: Twin | None = None
    notes: list[str] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list, repr=False)
    trace: list[dict] = field(default_factory=list, repr=False)
    segments: list[dict] = field(default_factory=list, repr=False)

    def memory_map(self) -> tuple[list[dict], dict]:
        """``(trace, categories)`` for :func:`helpers.teaching.plots.plot_memory_map`: the trace with each allocation
        and its free numbered by the allocation's position (``serial``), and number -> category (None, a block from
        before the recording: ``before_recording``)."""
        serial_of, trace = {}, []
        for i, e in enumerate(self.trace):
            if e["action"] == "alloc":
                serial_of[e["addr"]] = i
            serial = serial_of.pop(e["addr"], None) if e["action"] == "free_completed" else serial_of.get(e["addr"])
            trace.append({**e, "serial": serial if e["action"] in ("alloc", "free_completed") else None})
        return trace, {None: "before_recording"} | {b.allocated: b.category for b in self.blocks}

    def lines(self, top: int = 5) -> list[str]:
        """The report as text: the peak first, what filled it, reserved memory and segments, the twin, the notes."""
        out = [f"peak of live tensors: {fmt_mib(self.peak_bytes)} (device {self.device}), after trace entry "
               f"{self.peak:,} of {self.entries:,}"]
        block = next((b for b in self.live_at_peak if b.allocated == self.peak), None)
        if block is not None:
            out.append(f"  reached by an allocation of {_size(block.size)} ({block.category.replace('_', ' ')}) "
                       f"at {where(block.frames)}" + (f"; {block.place}" if block.twin is not None else ""))
        out.append("what was live at the peak:")
        out += [f"  {c.replace('_', ' '):<17} {_size(n):>14}" for c, n in self.by_category.items() if n]
        out.append(f"the {min(top, len(self.live_at_peak))} largest tensors live at the peak:")
        out += [f"  {fmt_mib(b.size):>14}  {b.category.replace('_', ' '):<17} {b.place}"
                for b in self.live_at_peak[:top]]
        out.append(f"reserved at the peak: {fmt_mib(self.reserved[self.peak])}; highest: {fmt_mib(max(self.reserved))};"
                   f" at the end: {fmt_mib(self.reserved[-1])}")
        if self.allocated is not None:
            out += [f"memory_allocated() at the peak: {fmt_mib(self.allocated[self.peak])} in blocks, "
                    f"{fmt_mib(self.allocated[self.peak] - self.peak_bytes)} beyond the tensors (rounding, unsplit "
                    f"rests); max_memory_allocated() over the trace: {fmt_mib(max(self.allocated))}",
                    f"segments at the peak: {self.segments_at_peak}, {fmt_mib(self.free_in_segments)} free (cached) in "
                    f"them; the largest free block: {fmt_mib(self.largest_free)}"]
        return out + (self.twin.lines() if self.twin else []) + [f"note: {n}" for n in self.notes]

    def to_dict(self) -> dict:
        """The report as JSON-ready data, the per-entry lists included."""
        return {"device": self.device, "entries": self.entries, "peak_entry": self.peak,
                "peak_tensor_bytes": self.peak_bytes, "by_category": self.by_category,
                "reserved_at_peak_bytes": self.reserved[self.peak], "peak_reserved_bytes": max(self.reserved),
                "allocated_at_peak_bytes": None if self.allocated is None else self.allocated[self.peak],
                "peak_allocated_bytes": None if self.allocated is None else max(self.allocated),
                "largest_free_block_bytes": self.largest_free, "free_in_segments_bytes": self.free_in_segments,
                "segments_at_peak": self.segments_at_peak,
                "live_at_peak": [{"bytes": b.size, "category": b.category, "where": b.place,
                                  "allocated_at": b.allocated} for b in self.live_at_peak],
                "twin": self.twin.to_dict() if self.twin else None, "notes": self.notes,
                "tensors": self.tensors, "reserved": self.reserved, "allocated": self.allocated}


def explain_snapshot(source: str | Path | bytes | dict, device: int | None = None,
                     step: StepProfile | None = None) -> SnapshotReport:
    """Explain a memory snapshot (the module's docstring): the peak of live tensors and what was live then by
    category, reserved memory over time, and, when the trace replays, the blocks and free space at the peak.

    Args:
        source: a path, bytes or a dictionary, as :func:`load_snapshot` takes.
        device: the CUDA device whose history to read (default: the only one recorded).
        step: the same step simulated (``helpers.profile_step(..., device="simulated")``): aligned by :func:`align`.

    Raises:
        SnapshotError: as :func:`load_snapshot` and :func:`pick_trace` do.
    """
    snapshot = load_snapshot(source)
    device, trace = pick_trace(snapshot, device)
    segments = [s for s in snapshot["segments"] if s.get("device", device) == device]
    blocks = _blocks(trace, segments)
    tensors, now = [], sum(b.size for b in blocks if b.allocated is None)
    reserved, held = [], sum(s["total_size"] for s in segments)
    sign = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}
    held -= sum(sign.get(e["action"], 0) * e["size"] for e in trace)
    for e in trace:
        now += {"alloc": 1, "free_requested": -1}.get(e["action"], 0) * e["size"]
        held += sign.get(e["action"], 0) * e["size"]
        tensors.append(now)
        reserved.append(held)
    peak = max(range(len(trace)), key=tensors.__getitem__)
    live = sorted(_live(blocks, peak), key=lambda b: -b.size)
    report = SnapshotReport(device, len(trace), tensors, reserved, peak, tensors[peak], live, by_category(live),
                            blocks=blocks, trace=trace, segments=segments)
    if not any(e.get("frames") for e in trace):
        report.notes.append("the trace has no stacks, so every category is a guess: record with "
                            "torch.cuda.memory._record_memory_history(stacks='python')")
    _replay_blocks(report, snapshot.get("allocator_settings") or {})
    if step is not None:
        report.twin = align(report, step)
    if report.by_category["before_recording"]:
        report.notes.append(f"{fmt_mib(report.by_category['before_recording'])} live at the peak was allocated before "
                            f"the recording began: no stack says what it is (record from before the step)")
    return report


def trace_log(trace: list[dict], segments: list[dict]) -> tuple[list[tuple[int, str, int]], list[int], list[int]]:
    """``(log, segment addresses, lengths)``: the trace as an allocation log for :func:`helpers.allocator.replay` (one
    allocation per ``alloc``, one free per ``free_completed``) after the blocks live at its start; the addresses at
    which the driver put each segment (those opened before the recording first); the log's length after each entry.

    A segment opened before the recording (``torch.cuda.empty_cache()`` keeps a segment that holds a live block: the
    cuBLAS workspaces, or a step's parameters) holds, at the start, the blocks live at the end that the trace did not
    allocate and the blocks the trace frees without having allocated them, each at its address; the rest of it is free.
    The log allocates those blocks first, in address order, which must put each where it is, in a segment of its
    size, as the allocator model checks (:func:`helpers.allocator.replay`); the trace may then allocate in their
    free space, as the GPU's allocator did.

    Raises:
        SnapshotError: if allocating the blocks live at the start anew does not rebuild the segments opened before the
            recording (then the state at its start is not in the snapshot), or if a free waits for another stream
            (``free_requested`` not followed by its ``free_completed``: the replay frees a block once).
    """
    opened = [e["addr"] for e in trace if e["action"] in ("segment_alloc", "segment_map")]
    before = sorted((s for s in segments if s["address"] not in set(opened)), key=lambda s: s["address"])
    allocated_here, freed_first = set(), {}
    for e in trace:
        if e["action"] == "alloc":
            allocated_here.add(e["addr"])
        elif e["action"] == "free_completed" and e["addr"] not in allocated_here:
            freed_first.setdefault(e["addr"], e["size"])
    live = {b["address"]: b["size"] for s in before for b in s["blocks"]
            if b["state"] == "active_allocated" and b["address"] not in allocated_here}
    at_start = sorted({**live, **freed_first}.items())  # a freed one's size is its request: the model rounds it
    _check_start(at_start, set(live), before)
    log = [(i, "alloc", size) for i, (_, size) in enumerate(at_start)]
    serial_of, lengths = {address: i for i, (address, _) in enumerate(at_start)}, []
    for i, e in enumerate(trace):
        after = trace[i + 1] if i + 1 < len(trace) else {}
        if e["action"] == "free_requested" and (after.get("action"), after.get("addr")) != ("free_completed",
                                                                                           e["addr"]):
            raise SnapshotError(f"a free waited for another stream (record_stream) at entry {i:,}, so "
                                f"memory_allocated() fell before the block was free")
        if e["action"] == "alloc":
            serial_of[e["addr"]] = len(log)
            log.append((len(log), "alloc", e["size"]))
        elif e["action"] == "free_completed":
            log.append((serial_of.pop(e["addr"]), "free", -e["size"]))
        lengths.append(len(log))
    return log, [s["address"] for s in before] + opened, lengths


def _check_start(blocks: list[tuple[int, int]], sized: set[int], before: list[dict]) -> None:
    """Raise :class:`SnapshotError` unless allocating ``blocks`` (``(address, bytes)``, in address order) into an empty
    allocator model, whose segments open at the addresses of ``before`` (the segments opened before the recording),
    puts every block at its address, those at the addresses in ``sized`` with their bytes as the block's size (a block
    the snapshot shows; the others are requests the trace freed), and opens exactly those segments, each of its size."""
    if not blocks and not before:
        return
    start = replay([(i, "alloc", size) for i, (_, size) in enumerate(blocks)],
                   segment_addresses=[s["address"] for s in before]).allocator
    placed = sorted((b.address, b.size) for seg in start.segments for b in seg.blocks if b.allocated)
    if [a for a, _ in placed] != [a for a, _ in blocks] or \
            any(size != dict(blocks)[a] for a, size in placed if a in sized) or \
            sorted((seg.address, seg.size) for seg in start.segments) != \
            [(s["address"], s["total_size"]) for s in before]:
        raise SnapshotError("the segments opened before the recording cannot be rebuilt from the blocks live in them "
                            "(the state at its start is not in the snapshot); call torch.cuda.empty_cache() "
                            "before recording")


def _replay_blocks(report: SnapshotReport, settings: dict) -> None:
    """Fill ``allocated`` and the segments at the peak by replaying the trace, if the replay ends where the snapshot
    does (reserved and allocated); else add a note saying why not."""
    why = "blocks and free space not replayed: "
    if settings.get("expandable_segments") or settings.get("max_split_size", -1) not in (-1, None):
        report.notes.append(why + "the allocator model replays the default settings only, and this snapshot was "
                                  "recorded with " + (settings.get("PYTORCH_CUDA_ALLOC_CONF") or
                                                      "expandable segments or max_split_size_mb"))
        return
    try:
        log, addresses, lengths = trace_log(report.trace, report.segments)
    except SnapshotError as e:
        report.notes.append(why + str(e))
        return
    emptied = [lengths[i] for i, e in enumerate(report.trace) if e["action"] in ("segment_free", "segment_unmap")]
    run = replay(log, segment_addresses=addresses, empty_cache_at=emptied)
    ended = sum(b["size"] for s in report.segments for b in s["blocks"] if b["state"] == "active_allocated")
    if run.error is not None or not log or (run.reserved[-1], run.allocated[-1]) != (report.reserved[-1], ended):
        report.notes.append(why + "the allocator model does not end where this snapshot does (another PyTorch's "
                                  "allocator, or segments released otherwise than by empty_cache())")
        return
    report.allocated = [run.allocated[k - 1] if k else 0 for k in lengths]
    report.replayed_peak_reserved = run.peak_reserved
    at_peak = replay(log[:lengths[report.peak]], segment_addresses=addresses, empty_cache_at=emptied).allocator
    report.largest_free, report.segments_at_peak = at_peak.largest_free(), len(at_peak.segments)
    report.free_in_segments = at_peak.reserved - at_peak.allocated
