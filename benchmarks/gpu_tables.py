"""What a lent GPU adds to the course's tables, and the lessons run there as notebooks (issue 51, item 4).

``make gpu-reference`` runs this after ``benchmarks/gpu_reference.py``; alone: ``python benchmarks/gpu_tables.py``.
On a machine with an NVIDIA GPU, within ``--budget`` seconds (default 600, one device command):

1. every distinct 2-D convolution of the course's CNN steps (:data:`STEPS`: the torchvision models of
   ``gpu_reference.RUNS`` at the batch sizes the lessons use; read on the ``meta`` device, :func:`convolutions`) is
   run alone, ``y = conv2d(x, w, None, stride, padding, dilation, groups); y.backward(ones)`` in float32 and
   float16, with ``torch.cuda.memory._record_memory_history(stacks="all")``; each workspace request, known by its
   C++ frames (:func:`helpers.snapshot.category_of`), is counted by pass (:func:`workspaces_by_pass`), into
   ``lessons/data/cudnn_workspaces_<card>.json`` (the fields of ``cudnn_workspaces_h200.json``, with ``dilation``
   and ``groups``, and the card, cuDNN version and TF32 setting in its header);
2. the bias-gradient reductions of the same steps' ``Linear`` layers, ``x.sum(0)`` over (batch, features), each
   allocation in order, ``tensor`` or ``reduce`` (made inside ``gpu_reduce_kernel``), into
   ``lessons/data/reductions_<card>.json`` (the fields of ``reductions.json``);
3. every lesson executed as a notebook on the GPU (``python -m nbconvert --execute``; an error fails it, outputs are
   not compared), with its time, into ``lessons/data/gpu_lessons_<card>.json``.

Before each part it prints its estimate; what would overrun the budget is skipped and said.  Without a GPU it says so
in one line and writes nothing (the tests run that, and the parts that need no GPU).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from helpers.snapshot import category_of  # noqa: E402

#: The CNN steps whose convolutions are recorded: (model, batch sizes), as ``gpu_reference.RUNS`` and lessons 01-04
#: run them (ViT-B/16's and Swin-T's patch embeddings are convolutions too), and lesson 02's dropout MLP (Linear only).
STEPS = {"resnet18": (32, 128, 256), "mobilenet_v2": (32,), "vgg11": (32,), "resnet50": (32,), "vit_b_16": (32,),
         "swin_t": (32,), "dropout MLP": (4096,)}
DTYPES = ("float32", "float16")
#: Seconds each item is estimated to take on a GPU (cuDNN's first call of a shape, a lesson's kernel start and run).
ESTIMATE = {"convolution": 0.5, "reduction": 0.05, "lesson": 45.0}
CONV_ABOUT = ("cuDNN convolution workspaces measured on one GPU: each convolution of the course's CNN steps run alone "
              "(y = conv2d(x, w, None, stride, padding, dilation, groups); y.backward(ones)), its workspace requests by "
              "pass from torch.cuda.memory._record_memory_history(stacks='all') traces (benchmarks/gpu_tables.py). "
              "Bytes as requested; a pass without an entry requested none. Isolated convolutions only.")
REDUCTION_ABOUT = ("The bias-gradient reductions of the course's steps, x.sum(0) over (rows, features), each allocation "
                   "in order: 'reduce' if made inside gpu_reduce_kernel, else 'tensor' (benchmarks/gpu_tables.py).")
#: Passes by the ATen function a workspace is requested in (innermost first: backward's before forward's name).
PASSES = (("cudnn_convolution_backward_weight", "backward_weight"),
          ("cudnn_convolution_backward_input", "backward_input"),
          ("cudnn_convolution_forward", "forward"), ("cudnn_convolution(", "forward"))


def _model(name: str) -> tuple[torch.nn.Module, tuple[int, ...]]:
    """The model on the meta device, and its input's shape without the batch."""
    with torch.device("meta"):
        if name == "dropout MLP":
            from helpers.models import dropout_mlp
            return dropout_mlp(), (1, 28, 28)
        import torchvision
        return torchvision.models.get_model(name, weights=None), (3, 224, 224)


def convolutions(steps: dict = STEPS) -> tuple[list[dict], list[dict]]:
    """``(convolutions, linears)``: every distinct ``Conv2d`` and ``Linear`` the steps' forward passes call, with the
    input's batch and size, in order of first use; read on the meta device (no memory, no GPU)."""
    convs, linears = {}, {}
    for name, batches in steps.items():
        model, shape = _model(name)
        for batch in batches:
            seen = []

            def hook(module, inputs, output, seen=seen):
                seen.append((module, tuple(inputs[0].shape)))

            handles = [m.register_forward_hook(hook) for m in model.modules()
                       if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
            with torch.no_grad():
                model(torch.empty(batch, *shape, device="meta"))
            for h in handles:
                h.remove()
            for m, x in seen:
                if isinstance(m, torch.nn.Conv2d):
                    row = {"batch": x[0], "in_channels": m.in_channels, "out_channels": m.out_channels,
                           "kernel": m.kernel_size[0], "stride": m.stride[0], "padding": m.padding[0],
                           "dilation": m.dilation[0], "groups": m.groups, "side": x[2], "width": x[3]}
                    convs.setdefault(tuple(row.values()), {**row, "models": []})["models"].append(name)
                else:
                    rows = 1
                    for n in x[:-1]:
                        rows *= n
                    if m.bias is not None:  # its gradient is the output's gradient summed over the rows
                        linears.setdefault((rows, m.out_features), {"rows": rows, "features": m.out_features,
                                                                     "models": []})["models"].append(name)
    for row in (*convs.values(), *linears.values()):
        row["models"] = sorted(set(row["models"]))
    return list(convs.values()), list(linears.values())


def workspaces_by_pass(trace: list[dict]) -> dict[str, int]:
    """The workspace requests of one isolated convolution's trace, in bytes by pass (``forward``,
    ``backward_input``, ``backward_weight``; the largest if a pass asked twice): an ``alloc`` whose C++ frames say it
    is cuDNN's (:func:`helpers.snapshot.category_of`), its pass from the ATen function it was made in."""
    out: dict[str, int] = {}
    for e in trace:
        frames = e.get("frames") or []
        if e["action"] != "alloc" or category_of(frames, False, False) != "cudnn_workspaces":
            continue
        names = " ".join(f.get("name", "") for f in frames)
        pass_ = next((p for key, p in PASSES if key in names), "forward")
        out[pass_] = max(out.get(pass_, 0), e["size"])
    return out


def reduction_allocs(trace: list[dict]) -> list[list]:
    """Each allocation of a reduction's trace in order: ``[bytes, "reduce"]`` when made inside ``gpu_reduce_kernel``
    (its staging buffer, its semaphores), else ``[bytes, "tensor"]``."""
    return [[e["size"], "reduce" if any("gpu_reduce_kernel" in f.get("name", "") for f in e.get("frames") or [])
             else "tensor"] for e in trace if e["action"] == "alloc"]


def _traced(call) -> list[dict]:
    """The device's trace of ``call()``, C++ frames included."""
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=100_000, stacks="all")
    try:
        call()
        torch.cuda.synchronize()
        snapshot = torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    return snapshot["device_traces"][torch.cuda.current_device()]


def record_convolution(conv: dict, dtype: str) -> dict:
    """One convolution run alone on the GPU: its row of the table."""
    dt = getattr(torch, dtype)
    c, k, g = conv["in_channels"], conv["kernel"], conv["groups"]
    x = torch.randn(conv["batch"], c, conv["side"], conv["width"], device="cuda", dtype=dt, requires_grad=c != 3)
    w = torch.randn(conv["out_channels"], c // g, k, k, device="cuda", dtype=dt, requires_grad=True)

    def step():
        y = torch.nn.functional.conv2d(x, w, None, conv["stride"], conv["padding"], conv["dilation"], g)
        y.backward(torch.ones_like(y))
        step.output_bytes = y.numel() * y.element_size()

    trace = _traced(step)
    row = {k: v for k, v in conv.items() if k != "models"} | {"dtype": dtype}
    return row | {"input_bytes": x.numel() * x.element_size(), "weight_bytes": w.numel() * w.element_size(),
                  "output_bytes": step.output_bytes, "workspace": workspaces_by_pass(trace), "models": conv["models"]}


def record_reduction(linear: dict, dtype: str) -> dict:
    """A bias gradient's reduction on the GPU: ``x.sum(0)`` over (rows, features)."""
    x = torch.randn(linear["rows"], linear["features"], device="cuda", dtype=getattr(torch, dtype))
    trace = _traced(lambda: x.sum(0))
    return {"op": "sum0", "shape": [linear["rows"], linear["features"]], "dtype": dtype, "out": [linear["features"]],
            "allocs": reduction_allocs(trace), "models": linear["models"]}


def header(card: str, about: str) -> dict:
    """What a table was measured on and with: the card, its SMs, cuDNN, the TF32 and benchmark settings."""
    props = torch.cuda.get_device_properties(0) if torch.cuda.is_available() else None
    return {"about": about, "gpu": card, "device_name": getattr(props, "name", card),
            "sms": getattr(props, "multi_processor_count", None),
            "max_threads_per_sm": getattr(props, "max_threads_per_multi_processor", None),
            "total_memory": getattr(props, "total_memory", None), "torch": torch.__version__,
            "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
            "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
            "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
            "benchmark": torch.backends.cudnn.benchmark, "deterministic": torch.backends.cudnn.deterministic,
            "recorded": datetime.date.today().isoformat()}


def slug(card: str) -> str:
    """A card's name in a file name: ``NVIDIA H200`` -> ``h200``."""
    return re.sub(r"[^a-z0-9]+", "_", card.lower().removeprefix("nvidia ")).strip("_")


def write_table(path: Path, head: dict, rows: list[dict]) -> None:
    """The table as JSON: its header, then one row a line."""
    body = ",\n".join("  " + json.dumps(r, separators=(",", ":")) for r in rows)
    path.write_text(json.dumps(head, indent=1)[:-2] + f',\n "rows": [\n{body}\n ]\n}}\n')


class Budget:
    """Seconds left of the command's budget; :meth:`fits` says whether an estimate still fits, and records skips."""

    def __init__(self, seconds: float):
        self.end, self.skipped = time.monotonic() + seconds, []

    def left(self) -> float:
        return self.end - time.monotonic()

    def fits(self, what: str, estimate: float) -> bool:
        if estimate <= self.left():
            return True
        self.skipped.append(f"{what} (estimated {estimate:.0f} s, {max(self.left(), 0):.0f} s left)")
        return False


def run_lessons(budget: Budget, lessons: list[Path]) -> list[dict]:
    """Each lesson executed as a notebook on the GPU, in a temporary folder: its status and seconds."""
    results = []
    if lessons and importlib.util.find_spec("nbconvert") is None:
        budget.skipped.append("every lesson: nbconvert is not installed here (README, 'Recording real-GPU figures': "
                              "make gpu-wheels)")
        return results
    with tempfile.TemporaryDirectory() as out:
        for lesson in lessons:
            if not budget.fits(f"lesson {lesson.name}", ESTIMATE["lesson"]):
                continue
            started = time.perf_counter()
            try:
                done = subprocess.run([sys.executable, "-m", "nbconvert", "--to", "notebook", "--execute",
                                       "--output-dir", out, str(lesson)], cwd=ROOT / "lessons", capture_output=True,
                                      text=True, timeout=max(budget.left(), 1))
            except subprocess.TimeoutExpired:
                budget.skipped.append(f"lesson {lesson.name} (stopped at the end of the budget, after "
                                      f"{time.perf_counter() - started:.0f} s)")
                continue
            error = next((line for line in reversed(done.stderr.splitlines()) if "Error" in line), "") \
                if done.returncode else ""
            results.append({"lesson": lesson.name, "ok": done.returncode == 0, "seconds": round(
                time.perf_counter() - started, 1), "error": error[:300] or None})
            print(f"  {lesson.name}: {'ok' if done.returncode == 0 else 'FAILED ' + error[:200]} "
                  f"({results[-1]['seconds']} s)", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "lessons" / "data", help="where to write")
    parser.add_argument("--budget", type=float, default=600, help="seconds for all of it (default 600)")
    parser.add_argument("--skip-lessons", action="store_true", help="leave out part 3")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu-tables: no CUDA GPU on this machine, nothing recorded")
        return 0
    budget, card = Budget(args.budget), torch.cuda.get_device_name(0)
    convs, linears = convolutions()
    lessons = [] if args.skip_lessons else sorted((ROOT / "lessons").glob("[0-9]*.ipynb"))
    estimate = (len(convs) * len(DTYPES) * ESTIMATE["convolution"] + len(linears) * 2 * ESTIMATE["reduction"]
                + len(lessons) * ESTIMATE["lesson"])
    print(f"gpu-tables: {card}; {len(convs)} convolutions x {len(DTYPES)} dtypes, {len(linears)} reductions x 2, "
          f"{len(lessons)} lessons: estimated {estimate:.0f} s of a {args.budget:.0f} s budget", flush=True)
    rows = [record_convolution(c, d) for d in DTYPES for c in convs
            if budget.fits(f"convolution {c} {d}", ESTIMATE["convolution"])]
    write_table(args.out / f"cudnn_workspaces_{slug(card)}.json", header(card, CONV_ABOUT), rows)
    reductions = [record_reduction(r, d) for d in ("float32", "bfloat16") for r in linears
                  if budget.fits(f"reduction {r} {d}", ESTIMATE["reduction"])]
    write_table(args.out / f"reductions_{slug(card)}.json", header(card, REDUCTION_ABOUT), reductions)
    print(f"recorded {len(rows)} convolutions and {len(reductions)} reductions; {budget.left():.0f} s left", flush=True)
    results = run_lessons(budget, lessons)
    (args.out / f"gpu_lessons_{slug(card)}.json").write_text(json.dumps(
        header(card, "lessons executed as notebooks on the GPU") | {"lessons": results, "skipped": budget.skipped},
        indent=1) + "\n")
    for line in budget.skipped:
        print(f"  skipped, over the budget: {line}")
    failed = [r["lesson"] for r in results if not r["ok"]]
    print(f"lessons: {len(results) - len(failed)} ran, {len(failed)} failed {failed}; {len(budget.skipped)} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
