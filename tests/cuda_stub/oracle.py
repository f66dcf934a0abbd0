"""Replays allocation logs through PyTorch's own caching allocator on the stub driver, each in a fresh allocator.

Run only in a subprocess with the stub preloaded (``tests/test_allocator_oracle.py``
does that): ``LD_PRELOAD=<stub>/libcuda.so.1 python oracle.py < jobs.json``.  The
input is a JSON list of jobs ``{"ops": [...], "fraction": f or null, "env": {...}, "out": path}``; each op is
``["alloc", id, nbytes]`` (``torch.cuda.caching_allocator_alloc``),
``["tensor", id, nbytes]`` (``torch.empty(nbytes, dtype=torch.uint8, device="cuda")``),
``["free", id]`` (``caching_allocator_delete``, or dropping the tensor),
``["empty_cache"]``, ``["settings", conf, ...]`` (``torch._C._accelerator_setAllocatorSettings``)
or ``["fraction", f]`` (``torch.cuda.set_per_process_memory_fraction``); ``env`` holds the
job's ``PYTORCH_CUDA_ALLOC_CONF`` and the stub's ``STUB_CUDA_CAPACITY`` and ``STUB_CUDA_TOTAL``.
A job ``{"refusals": [conf, ...], "out": path}`` instead writes, as one JSON list, whether PyTorch refuses each
setting with ValueError (:func:`run_refusals`).
Writes each job's answer to its ``out`` file as it goes, one line per op: the state after it,
:func:`state_line` of ``[oom, allocated, reserved, segments]``, where ``segments`` is the snapshot
(``torch.cuda.memory_snapshot(include_traces=False)``) reduced to
``[total_size, allocated_size, is_expandable, small, [[size, state, requested], ...]]``
per segment in address order (requested only for allocated blocks).  The test makes the model's lines with the same
:func:`state_line` and compares them, line by line, as strings.

torch is imported once, and CUDA is never initialised in this process: each job runs in a child forked from it
(``os.fork``), which sets the job's environment and then initialises CUDA itself, so that its allocator reads
``PYTORCH_CUDA_ALLOC_CONF`` and the stub reads its capacity as a process started with that environment would,
and it starts empty (no segment, no setting, no fraction of an earlier job).  That fresh allocator is what a
subprocess per job gave; what the fork saves is the import of torch for each (about 2.5 s of CPU).
"""

import ctypes
import json
import os
import signal
import sys
import traceback

_dumps = json.JSONEncoder(separators=(",", ":")).encode


def state_line(state: list) -> str:
    """One state as one line of compact JSON (no spaces): ``[oom, allocated, reserved, segments]``.  Equal lines
    are equal states, and stricter than equal lists: JSON tells ``true`` from ``1``."""
    return _dumps(state)


def reduced_snapshot(torch, given_back: list) -> list:
    """The segments of PyTorch's snapshot, reduced (see the module's docstring).

    ``torch._C._cuda_memorySnapshot((0, 0, False))`` is what ``torch.cuda.memory_snapshot(include_traces=False)``
    calls, without its wrapper: the segments, without the trace entries, at about a fifth of the CPU of the
    default (``None``, traces included: 0.28 against 0.05 ms a call here, with the same segments; the allocator
    records no history in this process, so there are no traces to leave out).  In 2.14.1 every call with a
    tuple drops a reference to the tuple's ``include_traces`` bool (``False`` here), which kills Python 3.11
    (``bool_dealloc``) after some thousands of calls; each call's lost reference is given back by appending
    ``False`` to ``given_back`` (a list that lives as long as the job).
    """
    segments = torch._C._cuda_memorySnapshot((0, 0, False))["segments"]
    given_back.append(False)
    out = []
    for seg in sorted(segments, key=lambda s: s["address"]):
        blocks = [[b["size"], b["state"], b["requested_size"] if b["state"] == "active_allocated" else 0]
                  for b in seg["blocks"]]
        out.append([seg["total_size"], seg["allocated_size"], bool(seg.get("is_expandable", False)),
                    seg["segment_type"] == "small", blocks])
    return out


def run_job(job: dict, out) -> None:
    """One job's states, in this process (a child forked for it: see the module's docstring), written to ``out``
    (a text file) one line per op."""
    import torch

    if torch.cuda.is_initialized():
        raise SystemExit("CUDA was initialised before the job's environment was set: the allocator is not fresh")
    os.environ.update(job.get("env", {}))  # read by the allocator and the stub when CUDA initialises, next
    if not torch.cuda.is_available():
        raise SystemExit("the stub did not load: torch.cuda.is_available() is False")
    torch.cuda.init()  # the allocator's per-device state exists only after CUDA's lazy init
    if job.get("fraction") is not None:
        torch.cuda.set_per_process_memory_fraction(job["fraction"])
    live: dict[int, int | torch.Tensor] = {}
    given_back: list[bool] = []
    for op in job["ops"]:
        oom = False
        if op[0] in ("alloc", "tensor"):
            try:
                live[op[1]] = (torch.cuda.caching_allocator_alloc(op[2]) if op[0] == "alloc"
                               else torch.empty(op[2], dtype=torch.uint8, device="cuda"))
            except torch.OutOfMemoryError:
                oom = True
        elif op[0] == "free":
            ptr = live.pop(op[1], None)
            if isinstance(ptr, int) and ptr:  # a 0-byte allocation is a null pointer: nothing to free
                torch.cuda.caching_allocator_delete(ptr)
            del ptr  # a tensor's block goes back here
        elif op[0] == "empty_cache":
            torch.cuda.empty_cache()
        elif op[0] == "settings":
            torch._C._accelerator_setAllocatorSettings(op[1])
        elif op[0] == "fraction":
            torch.cuda.set_per_process_memory_fraction(op[1])
        else:
            raise SystemExit(f"unknown op {op!r}")
        stats = torch._C._cuda_memoryStats(0)  # torch.cuda.memory_stats() before its flattening
        out.write(state_line([oom, stats["allocated_bytes"]["all"]["current"],
                              stats["reserved_bytes"]["all"]["current"], reduced_snapshot(torch, given_back)]))
        out.write("\n")


def run_refusals(job: dict, out) -> None:
    """A job ``{"refusals": [conf, ...], "out": path}``: for each setting, whether PyTorch refuses it with ValueError
    (``torch._C._accelerator_setAllocatorSettings``), written to ``out`` as one JSON list; in a child forked for it
    (see the module's docstring), so that no setting it accepts reaches a later job's allocator."""
    import torch

    refused = []
    for conf in job["refusals"]:
        try:
            torch._C._accelerator_setAllocatorSettings(conf)
            refused.append(False)
        except ValueError:
            refused.append(True)
    out.write(json.dumps(refused))


def main() -> None:
    import torch  # noqa: F401 (once, here: each job's child is forked with it imported)

    jobs = json.load(sys.stdin)
    for i, job in enumerate(jobs):
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:  # the child: one job, its file, and out without running the parent's exit handlers
            code = 0
            try:
                ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: killed with the parent (a timeout)
                with open(job["out"], "w") as out:
                    (run_refusals if "refusals" in job else run_job)(job, out)
            except BaseException:  # noqa: BLE001 (reported, and the exit status says it failed)
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        if status != 0:
            raise SystemExit(f"job {i} failed in its child (wait status {status})")


if __name__ == "__main__":
    main()
