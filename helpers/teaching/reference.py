"""Real-GPU figures recorded by ``make gpu-reference``, beside the simulated ones (lessons 00, 03, 04b, 06, 09b).

``benchmarks/gpu_reference.py`` runs each step of its list on the GPU (``max_memory_allocated``,
``max_memory_reserved``) and simulated, on one machine, and writes ``lessons/data/gpu_reference.json``: ``device``,
``torch``, ``cuda``, ``date``, ``dry_run`` and ``runs``, each with ``model``, ``batch_size``, ``config``, ``options``,
``cuda_peak_bytes``, ``simulated_peak_bytes`` (the engine's: the step's tensors), ``simulated_allocated_bytes`` and
``simulated_reserved_bytes`` (the simulated log replayed through :mod:`helpers.allocator`: peak allocated, unsplit rests
of blocks included as ``max_memory_allocated`` counts them, and peak reserved), ``cuda_reserved_bytes``,
``step_seconds``, ``events`` (``[module, phase, cuda_delta, simulated_delta]``), ``explained`` (the run's memory
snapshot beside its simulated step, as ``python -m helpers explain`` reads it; None in a dry run or a recording made
before it existed), ``error`` and, for a run kept from an earlier recording on the same device and torch, ``recorded``
(its date); and ``simulated_torch``
where the simulated figures were made again on another machine (``gpu_reference.py --resimulate``).  A difference is
what the simulation leaves out on that GPU.  Sizes in bytes.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

from ..gpus import GPU_SPECS, SIMULATED_GPU, cublas_workspace_bytes, device_card
from ..units import MiB, fmt_bytes

#: Where ``make gpu-reference`` writes its figures (in the repository, beside the lessons).
REFERENCE_FILE = Path(__file__).resolve().parents[2] / "lessons" / "data" / "gpu_reference.json"

#: Where ``make gpu-reference`` writes the memory snapshot of each run's cuda step (:func:`snapshot_name`).
SNAPSHOTS = REFERENCE_FILE.parent / "snapshots"

#: A run whose simulated peak is further than this from the GPU's is flagged.
TOLERANCE = 0.02

NOT_RECORDED = ("No GPU reference recorded yet: `make gpu-reference` on a machine with an NVIDIA GPU writes "
                "lessons/data/gpu_reference.json, and this cell then shows its figures beside the simulated ones.")


def load_reference(path: str | Path = REFERENCE_FILE) -> dict | None:
    """The recorded runs (the JSON above as a dict), or None when there is no file.

    Raises:
        ValueError: if the file exists but is not a reference file.
    """
    path = Path(path)
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        raise ValueError(f"{path} is not a GPU reference file (no 'runs' list)")
    return data


def snapshot_name(model: str, batch_size: int, config: str) -> str:
    """The file name of a recorded run's memory snapshot in :data:`SNAPSHOTS`, gzipped:
    ``snapshot_name("resnet18", 128, "AMP + checkpoint 4") == "resnet18_b128_amp_checkpoint_4.pickle.gz"``."""
    return re.sub(r"[^a-z0-9]+", "_", f"{model}_b{batch_size}_{config}".lower()).strip("_") + ".pickle.gz"


def recorded_snapshot(model: str, batch_size: int, config: str, folder: str | Path = SNAPSHOTS) -> Path | None:
    """The memory snapshot ``make gpu-reference`` recorded of one run's cuda step (``torch.cuda.memory._snapshot()``
    from an emptied cache, gzipped: :func:`helpers.snapshot.load_snapshot` reads it), or None if there is none."""
    path = Path(folder) / snapshot_name(model, batch_size, config)
    return path if path.exists() else None


#: What comparing reserved memory cannot settle: the allocator model places each new segment at addresses of its own,
#: the driver at others, and where two free blocks tie the lower address serves a request; so the same log can leave
#: a few segments more or fewer on the GPU than in the model (``benchmarks/gpu_trace_replay.py`` replays GPU traces at
#: the driver's addresses, which removes it).
ADDRESS_NOTE = ("the allocator model places segments at its own addresses, the driver at others: where free blocks "
                "tie, a different block can serve a request, so reserved memory can differ by a few segments")


#: What cuDNN took on the H200 of the recording (``lessons/data/``, each file's ``about`` says how it was measured):
#: the workspaces of isolated convolutions (the table ``workspaces="measured"`` reads), and its settings' effects
#: (``cudnn.benchmark``, TF32 off, a memory cap).
CUDNN_FILES = {"workspaces": REFERENCE_FILE.parent / "cudnn_workspaces_h200.json",
               "settings": REFERENCE_FILE.parent / "cudnn_settings_h200.json"}


def cudnn_measurements() -> dict[str, dict]:
    """The two files of :data:`CUDNN_FILES`, read: ``{"workspaces": ..., "settings": ...}`` (lesson 04b, section 5)."""
    return {name: json.loads(path.read_text()) for name, path in CUDNN_FILES.items()}


def cublas_segment_bytes(data: dict) -> int:
    """The bytes of the cuBLAS workspaces every recorded step's reserved memory holds: ``make gpu-reference`` makes
    both handles' workspaces before the first run (``warm_up_cublas``) and they live on, 2 x
    :func:`helpers.gpus.cublas_workspace_bytes` of the recording card (64 MiB on an H200); the simulated replay does
    not make them.  A dry run's (no GPU) or an unknown card's: the card the simulation claims to be
    (:data:`helpers.gpus.SIMULATED_GPU`)."""
    card = device_card(str(data.get("device", ""))) or SIMULATED_GPU
    return 2 * cublas_workspace_bytes(GPU_SPECS[card].capability)


def simulated_allocated(run: dict) -> int | None:
    """The simulated figure to set beside the GPU's ``max_memory_allocated``: the allocator model's peak
    allocated, or the engine's peak in a file recorded before that field existed."""
    return run.get("simulated_allocated_bytes", run.get("simulated_peak_bytes"))


def relative_difference(run: dict) -> float | None:
    """(simulated - GPU) / GPU peak allocated of one recorded run (:func:`simulated_allocated`); None if it
    has no GPU figure."""
    sim = simulated_allocated(run)
    if not run.get("cuda_peak_bytes") or sim is None:
        return None
    return (sim - run["cuda_peak_bytes"]) / run["cuda_peak_bytes"]


def _label(run: dict) -> str:
    return f"{run['model'].split('/')[-1]} b{run['batch_size']} {run['config']}"  # a Hub name without its owner


def reference_report(model: str | None = None, batch_size: int | None = None,
                     path: str | Path = REFERENCE_FILE, reserved: bool = False) -> str:
    """The recorded runs as a table: peak allocated on the GPU and simulated (:func:`simulated_allocated`),
    their difference, and the step's tensors alone (the engine's peak); with ``reserved``, peak reserved on
    the GPU and simulated too, like for like: the simulated replay's plus the cuBLAS workspaces the GPU's held
    (:func:`cublas_segment_bytes`), then a line on what the comparison cannot settle (:data:`ADDRESS_NOTE`).

    ``model``, ``batch_size``: keep only those runs (None: all).  Returns the table, its label (device, torch, date) and
    a line naming the runs off by more than :data:`TOLERANCE`; or :data:`NOT_RECORDED` without a file.
    """
    data = load_reference(path)
    if data is None:
        return NOT_RECORDED
    runs = [r for r in data["runs"] if (model is None or r["model"] == model)
            and (batch_size is None or r["batch_size"] == batch_size)]
    where = "a dry run: the simulated backend stood in for the GPU" if data.get("dry_run") else data["device"]
    cublas = cublas_segment_bytes(data)
    simulated = (f"simulated with torch {data['simulated_torch']}" if data.get("simulated_torch")
                 else "simulated on the same machine")
    width = max([36] + [len(_label(run)) for run in runs])
    earlier = "".join(f" ({_label(r)}: {r['recorded']})" for r in runs if r.get("recorded"))
    head = f"Recorded on {where} (torch {data['torch']}, CUDA {data.get('cuda')}) on {data['date']}{earlier}; {simulated}."
    lines = [*(textwrap.wrap(head, 116, subsequent_indent="  ") if earlier else [head]),
             f"{'':<{width}} {'peak allocated':^49}" + (f"  {'peak reserved':^25}" if reserved else ""),
             f"{'run':<{width}} {'GPU':>12} {'simulated':>12} {'difference':>22}  {'tensors':>11}"
             + (f"  {'GPU':>12} {'simulated':>12}" if reserved else "")]
    if reserved:
        lines.insert(1, f"Reserved, simulated: the replay's + the {fmt_bytes(cublas)} of cuBLAS workspaces the GPU held "
                        f"through every run.")
    off = []
    for run in runs:
        if run.get("error"):
            lines.append(f"{_label(run):<{width}} {run['error']}")
            continue
        gpu, sim, diff = run["cuda_peak_bytes"], simulated_allocated(run), relative_difference(run)
        gpu_reserved, sim_reserved = run.get("cuda_reserved_bytes"), run.get("simulated_reserved_bytes")
        sim_reserved = None if sim_reserved is None else sim_reserved + cublas
        lines.append(f"{_label(run):<{width}} {fmt_bytes(gpu):>12} {fmt_bytes(sim):>12} "
                     f"{fmt_bytes(sim - gpu, sign=True) + f' ({diff:+.2%})':>22}  "
                     f"{fmt_bytes(run['simulated_peak_bytes']):>11}"
                     + (f"  {fmt_bytes(gpu_reserved) if gpu_reserved is not None else '-':>12} "
                        f"{fmt_bytes(sim_reserved) if sim_reserved is not None else '-':>12}" if reserved else ""))
        if abs(diff) > TOLERANCE:
            off.append(_label(run))
    lines += (textwrap.wrap(f"off by more than {TOLERANCE:.0%}: {', '.join(off)}", 100, subsequent_indent="  ")
              if off else [f"every run within {TOLERANCE:.0%} of the GPU's peak"])
    if reserved:
        lines += textwrap.wrap(f"Reserved: {ADDRESS_NOTE}.", 100, subsequent_indent="  ")
    return "\n".join(line.rstrip() for line in lines)


def module_differences(model: str, batch_size: int, config: str, min_bytes: int = MiB,
                       path: str | Path = REFERENCE_FILE) -> str:
    """The module events of one recorded run whose GPU and simulated deltas differ by ``min_bytes`` or more.

    Returns one line per event (module, phase, GPU delta, simulated delta), a
    line saying none differ, or :data:`NOT_RECORDED` without a file.

    Raises:
        KeyError: if the file has no such run.
    """
    data = load_reference(path)
    if data is None:
        return NOT_RECORDED
    run = next((r for r in data["runs"] if (r["model"], r["batch_size"], r["config"]) == (model, batch_size, config)),
               None)
    if run is None:
        raise KeyError(f"no recorded run {model} b{batch_size} {config}")
    if not run.get("events"):
        return f"{_label(run)}: no per-module events recorded ({run.get('error') or 'event lists differ'})"
    rows = [(module, phase, gpu, sim) for module, phase, gpu, sim in run["events"] if abs(gpu - sim) >= min_bytes]
    if not rows:
        return f"{_label(run)}: every event's delta agrees within {fmt_bytes(min_bytes)}"
    lines = [f"{_label(run)}: events whose deltas differ by {fmt_bytes(min_bytes)} or more",
             f"{'module':<28} {'phase':<10} {'GPU':>12} {'simulated':>12}"]
    lines += [f"{module if module is not None else '(step)':<28} {phase:<10} {fmt_bytes(gpu, sign=True):>12} "
              f"{fmt_bytes(sim, sign=True):>12}" for module, phase, gpu, sim in rows]
    return "\n".join(lines)
