"""GPU reference runs: each training step on a real GPU and simulated, recorded for the lessons.

``make gpu-reference`` (or ``python benchmarks/gpu_reference.py``) on a machine
with an NVIDIA GPU:

1. runs every step of :data:`RUNS` twice, with the ``cuda`` backend and
   simulated, and records the GPU's ``max_memory_allocated`` and
   ``max_memory_reserved``, the simulated peak and peak reserved memory (the
   allocation log replayed through :mod:`helpers.allocator`), the per-module deltas of both
   and the wall time of an untraced step (:func:`helpers.profile.time_step`).
   It writes ``gpu_reference.json`` (the format is in :mod:`helpers.teaching.reference`)
   into ``--out`` (default ``lessons/data``) after every run, so an
   interrupted harness resumes where it stopped: a run already recorded there
   on this device and torch is kept (``--fresh`` starts over);
2. records a memory snapshot of one ResNet18 step at batch 128
   (``torch.cuda.memory._record_memory_history``), to open at
   https://pytorch.org/memory_viz: ``gpu_snapshot_resnet18_b128.pickle``;
   and, in step 1, one of each run's cuda step, gzipped, in ``snapshots/``
   (:func:`snapshot_name`), explained beside the run's simulated step as
   ``python -m helpers explain`` does it: the record's ``explained``
   (:func:`_explained`);
3. runs the test suite and every lesson under nbval on the GPU, and prints
   which failed (also written to ``gpu_tests.txt``).

Before the first run it makes the cuBLAS workspaces of both threads
(:func:`warm_up_cublas`), so that no run counts them.  Without a GPU it says
so in one line and exits with status 0, writing nothing.  ``--resimulate``
needs no GPU: it simulates a recorded file's runs again here, keeping the
GPU's figures (:func:`resimulate`).  ``--dry-run`` runs steps 1 and 2 with the simulated backend in place
of ``cuda`` (into a new temporary folder unless ``--out`` is given; the
allocation log of the ResNet18 step stands in for the snapshot) and lists the
commands of step 3 without running them: the tests run it so (CI has no GPU).
After a real run, refresh lessons 00, 03, 04b, 06, 06a and 09 (``make refresh-notebooks``),
whose GPU-reference cells then show the figures, and commit the folder.

Through the ``device`` tool (a machine with PyTorch but without this
project's test packages), see README.md, "Recording real-GPU figures".
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import gc
import gzip
import importlib.util
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # helpers, also where the project is not installed (the device machine)

import torch  # noqa: E402

from helpers import profile_step, time_step  # noqa: E402
from helpers.allocator import replay  # noqa: E402
from helpers.snapshot import explain_snapshot  # noqa: E402
from helpers.teaching import reference  # noqa: E402


@dataclass(frozen=True)
class Run:
    """One step to record: ``profile_step(model, batch_size, **options)``."""

    model: str
    batch_size: int
    config: str
    options: dict = field(default_factory=dict)

    @property
    def key(self) -> tuple:
        return self.model, self.batch_size, self.config


_RESNET = {"baseline": {}, "AMP": {"amp": True}, "checkpoint 4": {"checkpoint": 4},
           "AMP + checkpoint 4": {"amp": True, "checkpoint": 4}, "offload": {"offload": True}}
_GPT2 = {"seq_len": 1024, "optimizer": "adam", "steady_state": True}
#: Lesson 09's LoRA step: Llama-3.1 8B (its shipped config, random weights), rank 16 on q_proj and v_proj
#: over a bfloat16 base, bfloat16 autocast, AdamW, batch 1.
L8 = "meta-llama/Llama-3.1-8B"
_LORA = {"seq_len": 2048, "lora_rank": 16, "param_dtype": "bfloat16", "amp": True, "amp_dtype": "bfloat16",
         "optimizer": "adamw", "steady_state": True}
#: Lesson 09's QLoRA steps with bitsandbytes (``Linear4bit``, NF4 with double quantization; ``Linear8bitLt`` for
#: LLM.int8()): as in its sections 3 and 4, as Hugging Face's recipe runs it (``prepare_model_for_kbit_training``,
#: then TRL's embeddings back to bfloat16), and at 8,192 tokens with the whole logits and with the chunked loss.
_NF4 = {"quantization": "nf4", "double_quant": True}
_QLORA = {"QLoRA r16": _NF4, "QLoRA r16, checkpointing": {**_NF4, "checkpoint": 1},
          "QLoRA r16, checkpointing, k-bit prep, bf16 embeddings": {**_NF4, "checkpoint": 1, "prepare_kbit": True,
                                                                    "bf16_embeddings": True},
          "LoRA r16 on LLM.int8(), checkpointing": {"quantization": "int8", "checkpoint": 1},
          "QLoRA r16, checkpointing, 8,192 tokens": {**_NF4, "checkpoint": 1, "seq_len": 8192},
          "QLoRA r16, checkpointing, 8,192 tokens, chunked loss": {**_NF4, "checkpoint": 1, "seq_len": 8192,
                                                                   "loss": "chunked"}}

#: The steps recorded: ResNet18 in lesson 04's and 04b's configurations at three batch
#: sizes; five other vision models with and without AMP; GPT-2 124M at its full
#: context; lesson 02's dropout MLP; lesson 09's LoRA step of Llama-3.1 8B, with and without
#: activation checkpointing (last: the slowest to build).
RUNS = (
    [Run("resnet18", b, name, opts) for b in (32, 128, 256) for name, opts in _RESNET.items()]
    + [Run(m, 32, name, opts) for m in ("mobilenet_v2", "vgg11", "resnet50", "vit_b_16", "swin_t")
       for name, opts in (("baseline", {}), ("AMP", {"amp": True}))]
    + [Run("gpt2", 8, "Adam, steady state", _GPT2), Run("gpt2", 8, "AMP, Adam, steady state", {**_GPT2, "amp": True})]
    + [Run("dropout MLP", 4096, "steady state",
           {"model": "helpers.models:dropout_mlp", "input_shape": (1, 28, 28), "num_classes": 10,
            "steady_state": True})]
    + [Run(L8, 1, name, {**_LORA, **opts}) for name, opts in (("LoRA r16", {}), ("LoRA r16, checkpointing",
                                                                                {"checkpoint": 1}))]
    + [Run(L8, 1, name, {**_LORA, **opts}) for name, opts in _QLORA.items()]
)

SNAPSHOT = "gpu_snapshot_resnet18_b128.pickle"
DRY_SNAPSHOT = "simulated_allocation_log_resnet18_b128.json"
RESULTS = "gpu_reference.json"


def _call(run: Run) -> tuple[object, dict]:
    """The model argument and the other options of :func:`profile_step` for ``run``."""
    options = dict(run.options)
    model = options.pop("model", run.model)
    if model != run.model:
        options["name"] = run.model
    return model, options


def warm_up_cublas() -> None:
    """Create the cuBLAS workspaces of both threads of a training step before the first run.

    A matrix product on a thread's first use of a cuBLAS handle allocates that
    handle's workspace through the caching allocator (32 MiB on Hopper;
    ``CublasHandlePool.cpp``), and keeps it: the forward pass's on this
    thread, the backward pass's on autograd's thread for the GPU.  Made here,
    outside every run, no run's peak counts them, whatever ran before it: the
    simulated peak leaves them out too, and a verdict adds them (lesson 06).
    The H200's torch 2.11.0 also kept a 1 MiB block that the first ``Linear``
    with a bias of the process allocated (the snapshots of 2026-11-27: made in
    the first run's ``nn.Linear.forward``, still live in every later one; the
    product with a bias goes to cuBLASLt, ``addmm``), so a biased product is
    made here too.
    """
    x = torch.ones(8, 8, device="cuda", requires_grad=True)
    (x @ x).sum().backward()  # mm forward here, its gradients' mm on autograd's thread
    torch.nn.functional.linear(x.detach(), x.detach(), torch.ones(8, device="cuda"))  # addmm with a bias
    torch.cuda.synchronize()


def snapshot_name(run: Run) -> str:
    """The file name of ``run``'s memory snapshot (:func:`helpers.teaching.reference.snapshot_name`)."""
    return reference.snapshot_name(run.model, run.batch_size, run.config)


@contextlib.contextmanager
def built_once_on_the_gpu(model):
    """While a run's cuda steps are made: a Hugging Face model (``model`` a config's name) is built once, on the GPU,
    where random initialisation is fast (on the CPU: 92 s for Llama-3.1 8B's 8 billion weights on this project's
    2-core machine, and each 8B run took about three minutes on an H200, building twice), and kept in host memory; each build of the steps (``profile_step``, ``time_step``) is then a
    copy of it, made on the CPU, which they place on the GPU as they place a CPU build, counted.  Entered before the
    memory history starts, so that no snapshot holds the build.  Any other model, or a build that fails there (too
    large for the GPU), builds as usual."""
    from helpers.config import is_hf_config
    from helpers.models import hf

    kept, original = None, hf.CausalLMBuilder._build
    if isinstance(model, str) and is_hf_config(model):
        builder = hf.causal_lm(model)
        try:
            with torch.device("cuda"):
                kept = (_key(builder), original(builder).cpu())
        except Exception:  # noqa: BLE001 -- the steps build on the CPU, as without this
            kept = None
        gc.collect()
        torch.cuda.empty_cache()

    def build(builder):
        return copy.deepcopy(kept[1]) if kept is not None and _key(builder) == kept[0] else original(builder)

    hf.CausalLMBuilder._build = build
    try:
        yield
    finally:
        hf.CausalLMBuilder._build = original


def _key(builder) -> tuple[str, str]:
    return builder.config.to_json_string(), builder.attn_implementation


def measure(run: Run, device: str, repeats: int, snapshots: Path | None = None) -> dict:
    """One run: the step on ``device`` ("cuda", or "simulated" in a dry run) and simulated. With ``snapshots`` (a
    folder), the cuda step's memory history is recorded from its emptied cache, where only the cuBLAS workspaces
    live, and written there gzipped (:func:`snapshot_name`): what ``benchmarks/gpu_trace_replay.py`` replays."""
    model, options = _call(run)
    simulated = profile_step(model, run.batch_size, device="simulated", **options)
    explained = None
    if device == "cuda":
        with built_once_on_the_gpu(model):
            gc.collect()
            torch.cuda.empty_cache()  # each run's reserved memory is its own
            if snapshots is not None:
                torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")
            try:
                real = profile_step(model, run.batch_size, device="cuda", **options)
                if snapshots is not None:
                    taken = torch.cuda.memory._snapshot()
                    try:  # the GPU's figures are kept whatever the explanation meets
                        explained = _explained(explain_snapshot(taken, step=simulated))
                    except Exception as e:  # noqa: BLE001
                        explained = {"error": f"{type(e).__name__}: {e}"}
            finally:
                if snapshots is not None:
                    torch.cuda.memory._record_memory_history(enabled=None)
            reserved = torch.cuda.max_memory_reserved()
            seconds = time_step(model, run.batch_size, device=device, repeats=repeats, **options)
        if snapshots is not None:  # written once the run is whole: a snapshot beside a record of the same run
            snapshots.mkdir(parents=True, exist_ok=True)
            (snapshots / snapshot_name(run)).write_bytes(gzip.compress(pickle.dumps(taken), mtime=0))
    else:
        real, reserved = simulated, None
        seconds = time_step(model, run.batch_size, device=device, repeats=repeats, **options)
    return {
        "model": run.model, "batch_size": run.batch_size, "config": run.config,
        "options": {k: list(v) if isinstance(v, tuple) else v for k, v in run.options.items()},
        "cuda_peak_bytes": real.peak_allocated_bytes,
        "cuda_reserved_bytes": reserved,
        **_simulated_figures(simulated),
        "step_seconds": seconds,
        "events": _events(real.events, simulated.events),
        "explained": explained,
        "error": None,
    }


def _explained(report) -> dict:
    """What ``python -m helpers explain SNAPSHOT --model ...`` finds in a run's snapshot beside its simulated twin
    (:func:`helpers.snapshot.explain_snapshot`): the peak of tensors and the categories at it on both sides, the
    allocations aligned, and the five largest groups of what the GPU allocated and the simulation did not."""
    twin = report.twin.to_dict()
    return {key: twin[key] for key in ("aligned", "peak_tensor_bytes", "categories_at_peak_bytes",
                                       "peak_reserved_bytes")} | {
        "allocations": twin["aligned"] + sum(g["count"] for g in twin["gpu_only"]), "gpu_only": twin["gpu_only"][:5],
        "peak_allocated_bytes": max(report.allocated) if report.allocated else None}


def _simulated_figures(simulated) -> dict:
    """The simulated columns of a record: the engine's peak (the tensors), and the allocator model's peak
    allocated (unsplit rests of blocks included, as ``max_memory_allocated`` counts them) and peak reserved."""
    model = replay(simulated.allocation_log)
    return {"simulated_peak_bytes": simulated.peak_allocated_bytes,
            "simulated_allocated_bytes": model.peak_allocated,
            "simulated_reserved_bytes": model.peak_reserved}


def _events(real: list, simulated: list) -> list | None:
    """``[module, phase, GPU delta, simulated delta]`` per module event, or None where the two lists differ."""
    pairs = list(zip(real, simulated))
    same = len(real) == len(simulated) and all((a.module, a.phase) == (b.module, b.phase) for a, b in pairs)
    return [[a.module, a.phase, a.delta_bytes, b.delta_bytes] for a, b in pairs] if same else None


def resimulate(path: Path) -> int:
    """Simulate every run of a recorded file again on this machine, keeping the GPU's figures.

    For a file recorded on a GPU machine with another torch than this one's (the
    device's own), or after a change to the engine: its simulated figures and
    deltas become this engine's, and ``simulated_torch`` says which torch gave
    them.  A recorded run that :data:`RUNS` no longer holds is left as it was.
    Returns the number of runs whose simulated peak changed.
    """
    data = json.loads(path.read_text())
    runs = {run.key: run for run in RUNS}
    changed = 0
    for record in data["runs"]:
        run = runs.get((record["model"], record["batch_size"], record["config"]))
        if record.get("error") or run is None:
            continue
        model, options = _call(run)
        simulated = profile_step(model, run.batch_size, device="simulated", **options)
        changed += simulated.peak_allocated_bytes != record["simulated_peak_bytes"]
        record.update(_simulated_figures(simulated))
        events = record.get("events") or []
        same = len(events) == len(simulated.events) and all(
            (module, phase) == (e.module, e.phase) for (module, phase, _, _), e in zip(events, simulated.events))
        record["events"] = [[module, phase, gpu, e.delta_bytes]
                            for (module, phase, gpu, _), e in zip(events, simulated.events)] if same else None
    order = {key: i for i, key in enumerate(runs)}  # the order of RUNS, whenever each run was recorded
    data["runs"].sort(key=lambda r: order.get((r["model"], r["batch_size"], r["config"]), len(order)))
    data["simulated_torch"] = torch.__version__
    path.write_text(_dump(data))
    return changed


def snapshot(out: Path, device: str) -> Path:
    """A memory snapshot of one ResNet18 step at batch 128 (simulated: its allocation log)."""
    if device == "cuda":
        path = out / SNAPSHOT
        torch.cuda.memory._record_memory_history(max_entries=200_000, stacks="python")
        try:
            profile_step("resnet18", 128, device="cuda")
            torch.cuda.memory._dump_snapshot(str(path))
        finally:
            torch.cuda.memory._record_memory_history(enabled=None)
        return path
    path = out / DRY_SNAPSHOT
    log = profile_step("resnet18", 128, device="simulated").allocation_log
    path.write_text(json.dumps([[a.serial, a.kind, a.nbytes, a.category, a.event] for a in log]))
    return path


def test_commands(out: Path) -> list[tuple[str, list[str]]]:
    """The test runs of step 3: the unit tests and, where nbval is installed, the lessons; the groups ``make test``
    runs (not the slow ones: the browser, the stub driver), on 8 workers where pytest-xdist is installed, as ``make
    test`` spreads them (a file to a worker)."""
    workers = ["-n", "8", "--dist", "loadfile"] if importlib.util.find_spec("xdist") is not None else []
    base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "-m", "not slow",
            *workers, "--continue-on-collection-errors"]  # a test file that cannot import must not stop the others
    commands = [("unit tests", [*base, "tests", "--junitxml", str(out / "gpu_tests_unit.xml")])]
    if importlib.util.find_spec("nbval") is not None:
        commands.append(("lessons under nbval", [*base, "lessons", "--nbval", "--nbval-current-env",
                                                 "--nbval-sanitize-with", "tests/sanitize_output.cfg",
                                                 "--junitxml", str(out / "gpu_tests_lessons.xml")]))
    return commands


def failures(junit: Path) -> list[str]:
    """The failed or erroring tests of a JUnit XML report, as ``file::name: first line``."""
    lines = []
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        for problem in (*case.findall("failure"), *case.findall("error")):
            first = (problem.get("message") or "").strip().splitlines()[:1]
            lines.append(f"{case.get('classname')}::{case.get('name')}: {first[0] if first else problem.tag}")
    return lines


def run_tests(out: Path, dry_run: bool) -> list[str]:
    """Step 3; returns the summary lines."""
    summary = []
    commands = test_commands(out)
    if len(commands) == 1:
        summary.append("lessons not run: nbval is not installed here (see README, 'Recording real-GPU figures')")
    for what, command in commands:
        if dry_run:
            summary.append(f"would run ({what}): {' '.join(command)}")
            continue
        env = {**os.environ, "OMP_NUM_THREADS": "1",  # as make test: one thread a worker
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)  # the lessons import helpers
        junit = Path(command[-1])
        failed = failures(junit) if junit.exists() else [f"no report (exit status {done.returncode})"]
        last = done.stdout.strip().splitlines()[-1:] or ["(no output)"]
        summary.append(f"{what}: {last[0]}")
        summary += [f"  FAILED {line}" for line in failed]
    return summary


def _dump(data: dict) -> str:
    """The results as JSON text, one line per run (readable, and small in a diff)."""
    head = {k: v for k, v in data.items() if k != "runs"}
    runs = ",\n".join(f"  {json.dumps(r, separators=(',', ':'))}" for r in data["runs"])
    return json.dumps(head, indent=1)[:-2] + f',\n "runs": [\n{runs}\n ]\n}}\n'


def _load(path: Path, header: dict, fresh: bool) -> dict:
    """The results so far: the file's, if it was recorded on this device and torch, else none."""
    if path.exists() and not fresh:
        data = json.loads(path.read_text())
        if all(data.get(k) == header[k] for k in ("device", "torch", "dry_run")):
            return data
    return {**header, "runs": []}


@dataclass(frozen=True)
class Resimulated:
    """One recorded run beside its simulations on the card it was recorded on, without and with what kernels allocate
    for themselves (``workspaces="none"`` and ``"measured"``, or ``"bound"`` for a card without a cuDNN table).  Bytes;
    ``allocated``/``reserved``: ``(GPU, without, with)``, the simulated reserved figures with the cuBLAS workspaces the
    GPU held (:func:`helpers.teaching.reference.cublas_segment_bytes`); ``tensors_with``: the engine's peak with them;
    ``missing``: convolution passes the table does not hold."""

    label: str
    mode: str
    allocated: tuple[int, int, int]
    reserved: tuple[int, int, int]
    tensors_with: int
    missing: int

    def off(self, i: int, which: str = "allocated") -> float:
        """(simulated - GPU) / GPU of column ``i`` (1: without, 2: with) of ``which``."""
        row = getattr(self, which)
        return row[i] / row[0] - 1


def compare_with_tables(path: Path, only: str = "") -> list[Resimulated]:
    """Simulate each recorded run of ``path`` (whose model and configuration contain ``only``) on the card it was
    recorded on (:func:`helpers.gpus.device_card`), without and with its kernels' own memory: the measured cuDNN table
    of that card where one ships (:data:`helpers.engine.workspaces.CUDNN_TABLES`), else the bound.  Writes nothing."""
    from helpers.engine.workspaces import CUDNN_TABLES
    from helpers.gpus import GPU_CARDS, SIMULATED_GPU, device_card

    data = json.loads(path.read_text())
    card = device_card(data.get("device", "")) or SIMULATED_GPU
    mode = "measured" if card in CUDNN_TABLES else "bound"
    cublas = reference.cublas_segment_bytes(data)
    runs = {run.key: run for run in RUNS}
    rows = []
    for record in data["runs"]:
        run = runs.get((record["model"], record["batch_size"], record["config"]))
        if record.get("error") or run is None or only not in f"{run.model} {run.config}":
            continue
        model, options = _call(run)
        figures, missing, tensors = [], 0, 0
        for workspaces in ("none", mode):
            step = profile_step(model, run.batch_size, device="simulated", capacity=GPU_CARDS.get(card),
                                workspaces=workspaces, **options)
            replayed = replay(step.allocation_log)
            figures.append((replayed.peak_allocated, replayed.peak_reserved + cublas))
            tensors, missing = step.peak_allocated_bytes, step.cudnn_missing
        rows.append(Resimulated(f"{run.model.split('/')[-1]} b{run.batch_size} {run.config}", mode,
                                (record["cuda_peak_bytes"], figures[0][0], figures[1][0]),
                                (record["cuda_reserved_bytes"], figures[0][1], figures[1][1]), tensors, missing))
    return rows


def print_comparison(rows: list[Resimulated], card: str) -> None:
    """:func:`compare_with_tables`'s rows as a table, in MiB, with each simulated figure's difference from the GPU's."""
    mib = 2**20
    print(f"{'run':<42} {'peak allocated, MiB: GPU / without / with':>44}   {'peak reserved, MiB: GPU / without / with':>44}")
    for r in rows:
        cells = [f"{r.allocated[0] / mib:9,.1f} {r.allocated[1] / mib:9,.1f} ({r.off(1):+6.1%}) "
                 f"{r.allocated[2] / mib:9,.1f} ({r.off(2):+6.1%})",
                 f"{r.reserved[0] / mib:9,.1f} {r.reserved[1] / mib:9,.1f} ({r.off(1, 'reserved'):+6.1%}) "
                 f"{r.reserved[2] / mib:9,.1f} ({r.off(2, 'reserved'):+6.1%})"]
        print(f"{r.label:<42} {cells[0]}   {cells[1]}")
    print(f"without: workspaces='none' (the tensors); with: workspaces='{rows[0].mode if rows else ''}' on the {card}; "
          f"simulated reserved includes the cuBLAS workspaces the GPU held; {reference.ADDRESS_NOTE}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="the simulated backend in place of cuda")
    parser.add_argument("--out", type=Path, help="where to write (default lessons/data; a dry run: a temporary folder)")
    parser.add_argument("--fresh", action="store_true", help="record every run again")
    parser.add_argument("--only", default="", help="record only the runs whose model and configuration contain this text")
    parser.add_argument("--repeats", type=int, default=None, help="timed steps per run (default 3; dry run 1)")
    parser.add_argument("--skip-tests", action="store_true", help="leave out step 3")
    parser.add_argument("--resimulate", action="store_true",
                        help="no GPU needed: simulate the runs of the recorded file again here, keeping its GPU figures, "
                             "and print each beside its simulations without and with the kernels' own memory")
    parser.add_argument("--compare-only", action="store_true",
                        help="with --resimulate: print the comparison, leave the recorded file as it is")
    args = parser.parse_args(argv)
    if args.resimulate:
        path = (args.out or ROOT / "lessons" / "data") / RESULTS
        if not path.exists():
            parser.error(f"--resimulate: no recorded file {path}")
        if not args.compare_only:
            changed = resimulate(path)
            print(f"gpu-reference: {path} simulated again with torch {torch.__version__}; "
                  f"{changed} simulated peak(s) changed")
        from helpers.gpus import SIMULATED_GPU, device_card
        card = device_card(json.loads(path.read_text()).get("device", "")) or SIMULATED_GPU
        print_comparison(compare_with_tables(path, args.only), card)
        return 0
    if not args.dry_run and not torch.cuda.is_available():
        print("gpu-reference: no CUDA GPU on this machine, nothing recorded "
              "(--dry-run exercises the harness with the simulated backend)")
        return 0
    device = "simulated" if args.dry_run else "cuda"
    out = args.out or (Path(tempfile.mkdtemp(prefix="gpu-reference-")) if args.dry_run else ROOT / "lessons" / "data")
    out.mkdir(parents=True, exist_ok=True)
    repeats = args.repeats or (1 if args.dry_run else 3)
    header = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "simulated (dry run)",
              "torch": torch.__version__, "cuda": torch.version.cuda,
              "date": datetime.date.today().isoformat(), "dry_run": args.dry_run}
    results_path = out / RESULTS
    data = _load(results_path, header, args.fresh)
    done = {(r["model"], r["batch_size"], r["config"]) for r in data["runs"] if not r.get("error")}
    data["runs"] = [r for r in data["runs"]  # a failed run is tried again if selected, else its error is kept
                    if not (r.get("error") and args.only in f"{r['model']} {r['config']}")]
    print(f"gpu-reference: {header['device']}, torch {header['torch']}, writing {results_path}")
    if device == "cuda":
        warm_up_cublas()
    started = time.perf_counter()
    for run in RUNS:
        if args.only not in f"{run.model} {run.config}" or run.key in done:
            continue
        t = time.perf_counter()
        try:
            record = measure(run, device, repeats, out / "snapshots" if device == "cuda" else None)
        except Exception as e:  # noqa: BLE001 -- a run that fails is recorded with its error, and the others go on
            record = {"model": run.model, "batch_size": run.batch_size, "config": run.config,
                      "error": f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"}
        data["runs"].append(record)
        results_path.write_text(_dump(data))
        if record["error"]:
            print(f"  {run.model} b{run.batch_size} {run.config}: {record['error']}")
        else:
            diff = (record["simulated_peak_bytes"] - record["cuda_peak_bytes"]) / record["cuda_peak_bytes"]
            print(f"  {run.model} b{run.batch_size} {run.config}: {device} {record['cuda_peak_bytes'] / 2**20:.1f} MiB, "
                  f"simulated {record['simulated_peak_bytes'] / 2**20:.1f} MiB ({diff:+.2%}), "
                  f"step {record['step_seconds'] * 1e3:.1f} ms ({time.perf_counter() - t:.1f} s)")
    print(f"runs recorded in {time.perf_counter() - started:.0f} s")
    print(f"snapshot: {snapshot(out, device)}")
    if not args.skip_tests:
        summary = run_tests(out, args.dry_run)
        (out / "gpu_tests.txt").write_text("\n".join(summary) + "\n")
        print("\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
