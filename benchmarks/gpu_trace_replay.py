"""A real GPU's allocator trace replayed through the allocator model, with the model's addresses and the driver's.

``python benchmarks/gpu_trace_replay.py [SNAPSHOT]`` (default: the Llama-3.1 8B
LoRA step recorded on an H200, ``lessons/data/h200_2026-11-26/``) reads a
memory snapshot (``torch.cuda.memory._dump_snapshot``, gzipped or not) whose
history was recorded from an emptied cache, turns its trace into an allocation
log (one allocation per ``alloc`` event, one free per ``free_completed``),
and replays it through :class:`helpers.allocator.CachingAllocator` twice: with
the model's own ascending segment addresses, and with the addresses at which
the driver placed each segment (the trace's ``segment_alloc`` events).  It
prints the GPU's reserved memory at the end of the trace beside both.

The allocator picks the smallest free block that fits and, among equals, the
lowest address (``get_free_block``), so where the driver puts a segment decides
ties, and the tie-breaks decide which blocks get split and which segments must
be opened later.  The blocks live at the start of the trace, in segments that
existed before the recording, are allocated first, at their addresses
(:func:`helpers.snapshot.trace_log` checks that this rebuilds those segments).
Every run's snapshot in ``lessons/data/snapshots/`` (``make gpu-reference``, an
H200, 2026-11-27) replays so to the GPU's reserved memory, to the byte; of the
three in ``h200_2026-11-26/``, only the Llama step's does: the two ResNet18 ones
(kept for their C++ stacks: the cuDNN workspace at the peak of a checkpointed
step, the reduction buffer of the dropout MLP) started from a cache an earlier
step had filled, whose free space the snapshot cannot tell.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from helpers.allocator import replay  # noqa: E402
from helpers.snapshot import SnapshotError, load_snapshot, trace_log  # noqa: E402
from helpers.units import fmt_bytes  # noqa: E402

DEFAULT = ROOT / "lessons" / "data" / "h200_2026-11-26" / "llama_lora.pickle.gz"


def replay_inputs(path: Path) -> tuple[list[tuple[int, str, int]], list[int], int]:
    """``(log, segment addresses, reserved bytes at the end)`` of device 0's trace in the snapshot at ``path``
    (:func:`helpers.snapshot.trace_log`).

    Raises:
        helpers.snapshot.SnapshotError: for a file that is not a snapshot, or a trace that allocates in, or frees
            from, a segment opened before the recording (its state at the start is not in the snapshot).
    """
    snapshot = load_snapshot(path)
    log, addresses, _ = trace_log(snapshot["device_traces"][0], snapshot["segments"])
    return log, addresses, sum(s["total_size"] for s in snapshot["segments"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("snapshot", nargs="?", type=Path, default=DEFAULT)
    args = parser.parse_args(argv)
    try:
        log, addresses, reserved = replay_inputs(args.snapshot)
    except SnapshotError as e:
        parser.exit(1, f"{args.snapshot.name}: {e}\n")
    own = replay(log)
    driver = replay(log, segment_addresses=addresses)
    print(f"{args.snapshot.name}: {len(log):,} allocations and frees, {len(addresses)} segments on the GPU")
    print(f"  reserved on the GPU at the end:              {fmt_bytes(reserved)}")
    print(f"  model, its own ascending addresses:          {fmt_bytes(own.peak_reserved)} "
          f"({own.allocator.num_device_alloc} segments)")
    print(f"  model, the driver's addresses:               {fmt_bytes(driver.peak_reserved)} "
          f"({driver.allocator.num_device_alloc} segments)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
