"""Replays an allocation log through PyTorch's own caching allocator on the stub driver.

Run only in a subprocess with the stub preloaded (``tests/test_allocator_oracle.py``
does that): ``LD_PRELOAD=<stub>/libcuda.so.1 python oracle.py < log.json``.  The
log is a JSON object ``{"ops": [...], "fraction": f or null}``; each op is
``["alloc", id, nbytes]`` (``torch.cuda.caching_allocator_alloc``),
``["tensor", id, nbytes]`` (``torch.empty(nbytes, dtype=torch.uint8, device="cuda")``),
``["free", id]`` (``caching_allocator_delete``, or dropping the tensor),
``["empty_cache"]``, ``["settings", conf, ...]`` (``torch._C._accelerator_setAllocatorSettings``)
or ``["fraction", f]`` (``torch.cuda.set_per_process_memory_fraction``).
Prints one JSON line: for every op, ``[oom, allocated, reserved, segments]`` where
``segments`` is the snapshot (``torch.cuda.memory_snapshot()``) reduced to
``[total_size, allocated_size, is_expandable, small, [[size, state, requested], ...]]``
per segment in address order (requested only for allocated blocks).
"""

import json
import sys

import torch


def reduced_snapshot() -> list:
    # torch.cuda.memory_snapshot()'s segments, read without its wrapper: in 2.14.1 the
    # wrapper passes (0, 0, True) and every call drops a reference to True, which
    # kills Python 3.11 after some thousands of calls ("bool_dealloc").
    out = []
    for seg in sorted(torch._C._cuda_memorySnapshot(None)["segments"], key=lambda s: s["address"]):
        blocks = [[b["size"], b["state"], b["requested_size"] if b["state"] == "active_allocated" else 0]
                  for b in seg["blocks"]]
        out.append([seg["total_size"], seg["allocated_size"], bool(seg.get("is_expandable", False)),
                    seg["segment_type"] == "small", blocks])
    return out


def main() -> None:
    job = json.load(sys.stdin)
    if not torch.cuda.is_available():
        raise SystemExit("the stub did not load: torch.cuda.is_available() is False")
    torch.cuda.init()  # the allocator's per-device state exists only after CUDA's lazy init
    if job.get("fraction") is not None:
        torch.cuda.set_per_process_memory_fraction(job["fraction"])
    live: dict[int, int | torch.Tensor] = {}
    states = []
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
        states.append([oom, stats["allocated_bytes"]["all"]["current"], stats["reserved_bytes"]["all"]["current"],
                       reduced_snapshot()])
    print(json.dumps(states))


if __name__ == "__main__":
    main()
