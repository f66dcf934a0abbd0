"""A real GPU's memory snapshot explained (``helpers.snapshot``, ``python -m helpers explain``; issue 33).

The snapshots here are an H200's (``make gpu-reference``, 2026-11-26): lesson 06's ResNet18 step and the three of
``lessons/data/h200_2026-11-26/``.  ``tests/test_real_step_on_stub.py`` explains snapshots that PyTorch's own
allocator makes on the stub driver, beside PyTorch's counters and the simulated step.
"""

import gzip
import io
import pickle
from pathlib import Path

import pytest

from helpers.__main__ import main
from helpers.snapshot import (SNAPSHOT_CATEGORIES, SnapshotError, category_of, explain_snapshot, load_snapshot,
                              where)
from helpers.teaching.reference import load_reference

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "lessons" / "data" / "h200_2026-11-26"
RESNET = ROOT / "lessons" / "data" / "gpu_snapshot_resnet18_b128.pickle"


@pytest.fixture(scope="module")
def lora():
    return explain_snapshot(H200 / "llama_lora.pickle.gz")


def _end_blocks(report, field):
    return sum(b[field] for s in report.segments for b in s["blocks"] if b["state"] == "active_allocated")


def test_the_trace_ends_where_the_snapshot_does(lora):
    """Read back from the end: the tensors live after the last entry are the active blocks' requests, reserved memory
    is the segments', and the replayed blocks are the active blocks, to the byte."""
    assert lora.tensors[-1] == _end_blocks(lora, "requested_size")
    assert lora.reserved[-1] == sum(s["total_size"] for s in lora.segments)
    assert lora.allocated is not None and lora.allocated[-1] == _end_blocks(lora, "size")
    assert lora.peak_bytes == max(lora.tensors) and lora.tensors[lora.peak] == lora.peak_bytes
    assert sum(lora.by_category.values()) == lora.peak_bytes
    assert set(lora.by_category) == set(SNAPSHOT_CATEGORIES)


def test_max_memory_allocated_is_what_the_h200_reported(lora):
    """The replayed ``memory_allocated()`` peaks where the H200's ``max_memory_allocated()`` did, to the byte, once the
    two cuBLAS workspaces made before the recording (the harness's ``warm_up_cublas``) are taken off."""
    reference = load_reference()
    if reference is None or reference.get("dry_run"):
        pytest.skip("no GPU recording in lessons/data/gpu_reference.json")
    (run,) = [r for r in reference["runs"] if r["config"] == "LoRA r16"]
    before = sum(b.size for b in lora.blocks if b.allocated is None)
    assert before == 2 * 32 * 2**20
    assert max(lora.allocated) - before == run["cuda_peak_bytes"]
    assert lora.free_in_segments == lora.reserved[lora.peak] - lora.allocated[lora.peak]
    assert 0 < lora.largest_free <= lora.free_in_segments


def test_the_stacks_name_what_set_the_peak():
    """With C++ frames recorded (``stacks="all"``), the blocks at the peak say which kernel took them: a cuDNN
    workspace in a convolution's weight gradient (ResNet18 checkpointed), the staging buffer of a CUDA reduction (the
    dropout MLP's bias gradient)."""
    conv = explain_snapshot(H200 / "ckpt4_all.pickle.gz")
    (block,) = [b for b in conv.live_at_peak if b.allocated == conv.peak]
    assert "cudnn_convolution_backward_weight" in where(block.frames) and block.size == 207_733_415  # 198.1 MiB, freed at the next entry
    mlp = explain_snapshot(H200 / "mlp.pickle.gz")
    assert where(mlp.live_at_peak[0].frames).startswith("[gpu_reduce_kernel < structured_sum_out::impl]")
    assert mlp.live_at_peak[0].size == 32 * 2**20


def test_a_cache_filled_before_the_recording_is_said_not_guessed():
    """Lesson 06's snapshot began after a step had filled the cache: no replay of blocks, and a note for each thing the
    snapshot cannot tell."""
    report = explain_snapshot(RESNET)
    assert report.allocated is None and report.largest_free is None
    assert any("segments opened before the recording cannot be rebuilt" in n for n in report.notes)
    assert report.by_category["before_recording"] > 0 and any("before the recording" in n for n in report.notes)
    assert report.by_category["activations"] > report.peak_bytes / 2  # ResNet18's forward outputs at batch 128


def _segment(address, total, blocks):
    return {"address": address, "total_size": total, "blocks": [
        {"address": a, "size": size, "state": "active_allocated"} for a, size in blocks]}


def test_a_trace_may_allocate_in_a_segment_opened_before_it():
    """A 2 MiB small segment opened before the recording, holding one live 1 MiB block at its start (torch 2.11.0 kept
    such a block from the first Linear with a bias): the log allocates that block first, so that the trace's 512-byte
    allocation lands in the free half, where the GPU put it; a live block that could not have been allocated where it
    is (not at its segment's start) leaves the start unknown."""
    from helpers.allocator import replay
    from helpers.snapshot import trace_log

    base, MiB = 0x7F0000000000, 2**20
    trace = [{"action": "alloc", "addr": base + MiB, "size": 512}, {"action": "free_requested", "addr": base + MiB},
             {"action": "free_completed", "addr": base + MiB, "size": 512}]
    log, addresses, lengths = trace_log(trace, [_segment(base, 2 * MiB, [(base, MiB)])])
    assert log == [(0, "alloc", MiB), (1, "alloc", 512), (1, "free", -512)] and addresses == [base] and lengths == [2, 2, 3]
    run = replay(log, segment_addresses=addresses)
    assert run.reserved[-1] == 2 * MiB and run.allocator.num_device_alloc == 1
    with pytest.raises(SnapshotError, match="cannot be rebuilt"):
        trace_log(trace, [_segment(base, 2 * MiB, [(base + 512, MiB)])])
    # a 100-byte tensor live at the start and freed during the trace: the trace gives its request, the model its block
    freed = [{"action": "free_requested", "addr": base + MiB}, {"action": "free_completed", "addr": base + MiB, "size": 100}]
    log, _, _ = trace_log(freed, [_segment(base, 2 * MiB, [(base, MiB)])])
    assert log == [(0, "alloc", MiB), (1, "alloc", 100), (1, "free", -100)]
    # blocks live at the start in a segment that is gone from the snapshot (released during the trace): unknown start
    gone = [*freed, {"action": "segment_free", "addr": base, "size": 2 * MiB}]
    with pytest.raises(SnapshotError, match="cannot be rebuilt"):
        trace_log(gone, [])


@pytest.mark.parametrize("frames, live, before, expected", [
    ([{"filename": "/x/torch/optim/adam.py", "name": "_init_group"}], True, False, "optimizer_states"),
    ([{"filename": "/x/torch/optim/adam.py", "name": "_multi_tensor_adam"}], False, False, "other"),
    ([{"filename": "/x/torch/nn/modules/module.py", "name": "_apply"}], True, True, "parameters"),
    ([], True, False, "gradients"),
    ([], False, False, "other"),
    ([{"filename": "/x/torch/nn/modules/linear.py", "name": "forward"}], False, False, "activations"),
    ([{"filename": "/me/train.py", "name": "main"}], True, True, "input"),
    ([{"filename": "??", "name": "at::cuda::getCurrentCUDABlasHandle()"}], True, False, "cublas_workspaces"),
])
def test_each_stack_rule(frames, live, before, expected):
    assert category_of(frames, live, before) == expected


def _pickled(obj) -> bytes:
    buffer = io.BytesIO()
    pickle.dump(obj, buffer)
    return buffer.getvalue()


SNAPSHOT = RESNET.read_bytes()
BAD = {
    "missing file": (None, "cannot read it"),
    "not a pickle": (b"# a README\n", "not a memory snapshot: not a pickle file (it starts '# a README"),
    "truncated pickle": (SNAPSHOT[:5000], "not a whole snapshot: a pickle that ends early"),
    "a pickle whose marks are damaged": (SNAPSHOT[:2] + b"e" + SNAPSHOT[3:], "a pickle that is damaged"),
    "a pickle whose memo is damaged": (SNAPSHOT[:2] + b"h\x07" + SNAPSHOT[2:], "a pickle that is damaged"),
    "truncated gzip": ((H200 / "mlp.pickle.gz").read_bytes()[:5000], "the file ends early"),
    "a pickled class": (_pickled(Path("x")), "holds a pathlib"),
    "a pickled list": (_pickled([1, 2]), "a pickled list"),
    "a dict of other keys": (_pickled({"state": 1}), "without 'segments' and 'device_traces'"),
    "no history": (_pickled({"segments": [], "device_traces": [[], []]}), "has no history"),
    "two devices": (_pickled({"segments": [], "device_traces": [[{"action": "alloc", "addr": 0, "size": 8}]] * 2}),
                    "devices [0, 1]"),
    "an entry without a size": (_pickled({"segments": [], "device_traces": [[{"action": "alloc", "addr": 0}]]}),
                                "a trace entry without 'size'"),
    "traces by device number": (_pickled({"segments": [], "device_traces": {0: []}}), "not a list per device"),
    "segments without blocks": (_pickled({"segments": [{"address": 0, "total_size": 2}], "device_traces": [[]]}),
                                "a segment without 'blocks'"),
}


@pytest.mark.parametrize("name", BAD)
def test_a_bad_file_fails_in_one_line(tmp_path, capsys, name):
    content, message = BAD[name]
    path = tmp_path / "snap.pickle"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(SnapshotError, match="^[^\n]*$") as error:
        explain_snapshot(path)
    assert message in str(error.value)
    assert main(["explain", str(path)]) == 2  # the command line: exit status 2, one line, nothing on stdout
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("python -m helpers explain: error: ") and message in err
    for internal in ("MARK", "Memo", "opcode", "unpickling"):  # what is wrong with the file, not pickle's words
        assert internal not in err


def test_a_gzip_bomb_is_refused_fast_holding_no_more_than_the_cap(tmp_path, capsys):
    """A small gzip file that inflates past :data:`MAX_SNAPSHOT_BYTES` (here 2 GiB of zeros, 2 MiB on disk) is refused
    in one line as soon as the cap is passed, in well under a second, and its memory stays near the cap; the cap is
    far above the largest snapshot the course ships (inflated)."""
    import time
    import tracemalloc
    import zlib

    from helpers.snapshot_file import MAX_SNAPSHOT_BYTES

    shipped = [p for p in (ROOT / "lessons" / "data").rglob("*.pickle*")]
    largest = max(len(gzip.decompress(p.read_bytes())) if p.suffix == ".gz" else p.stat().st_size for p in shipped)
    assert 20 * largest < MAX_SNAPSHOT_BYTES == 256 * 2**20
    squeeze = zlib.compressobj(9, zlib.DEFLATED, 31)
    member = squeeze.compress(bytes(64 * 2**20)) + squeeze.flush()  # one gzip member: 64 MiB of zeros
    bomb = tmp_path / "bomb.pickle.gz"
    bomb.write_bytes(member * 32)  # 32 members, as gzip allows: 2 GiB inflated
    assert bomb.stat().st_size < 3 * 2**20
    tracemalloc.start()
    started = time.perf_counter()
    with pytest.raises(SnapshotError, match="^[^\n]*inflates to more than 256.0 MiB[^\n]*$"):
        load_snapshot(bomb)
    seconds, (_, peak) = time.perf_counter() - started, tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < MAX_SNAPSHOT_BYTES + 64 * 2**20 and seconds < 8, (peak, seconds)  # the issue: 4.7 GB, 9.9 s
    assert main(["explain", str(bomb)]) == 2 and "inflates to more than" in capsys.readouterr().err
    small = gzip.compress(SNAPSHOT)  # the same cap, stated smaller: a real snapshot past it is refused, under it read
    with pytest.raises(SnapshotError, match="inflates to more than 0.1 MiB"):
        load_snapshot(small, max_bytes=len(SNAPSHOT) - 1)
    assert load_snapshot(small, max_bytes=len(SNAPSHOT)) == load_snapshot(SNAPSHOT)
    with pytest.raises(SnapshotError, match="larger than 0.1 MiB"):  # a plain pickle past the cap: refused unread
        load_snapshot(RESNET, max_bytes=len(SNAPSHOT) - 1)


def test_a_gzipped_snapshot_reads_as_the_pickle(tmp_path):
    assert load_snapshot(gzip.compress(SNAPSHOT)) == load_snapshot(SNAPSHOT) == load_snapshot(RESNET)
    with pytest.raises(SnapshotError, match="no history for device 1"):
        explain_snapshot(RESNET, device=1)


def test_the_command_prints_the_answer_first_and_draws(tmp_path, capsys):
    """``python -m helpers explain FILE --plots DIR``, run as the command line's :func:`helpers.__main__.main` in this
    process (``python -m helpers`` in a process of its own, the module's entry point, is run by
    ``tests/test_cli.py``; a subprocess here cost a second torch import for the same output)."""
    assert main(["explain", str(H200 / "llama_lora.pickle.gz"), "--plots", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("peak of live tensors: 27,717.8 MiB")
    assert any(line.startswith("memory_allocated() at the peak") for line in lines)
    assert {p.name for p in tmp_path.iterdir()} == {"timeline.png", "memory_map.png"}



def test_pairing_finds_the_same_tensors_across_additions_and_reorders():
    """``helpers.alignment.pair`` on two made-up sequences: one side allocates three more (a workspace, two small
    buffers), two tensors are made in the other order, and one size differs; every other entry pairs with its own."""
    from helpers.alignment import pair

    a = [10, 20, 30, 99, 40, 50, 1, 1, 60, 70, 80, 90, 55, 100]
    b = [10, 20, 30, 40, 50, 60, 80, 70, 90, 66, 100]
    lives = [(i, i + 1) for i in range(len(a))], [(j, j + 1) for j in range(len(b))]
    assert pair(a, b, *lives) == {0: 0, 1: 1, 2: 2, 4: 3, 5: 4, 8: 5, 9: 7, 10: 6, 11: 8, 13: 10}


def test_equal_tensors_made_together_pair_by_lifetime():
    """Two tensors of one size made by one operation, in the other order on each side: the long-lived one (kept for
    backward) pairs with the long-lived one."""
    from helpers.alignment import pair

    a, b = [5, 7, 7, 9], [5, 7, 7, 9]
    assert pair(a, b, [(0, 1), (1, 90), (2, 3), (3, 4)], [(0, 1), (1, 2), (2, 80), (3, 4)]) == {0: 0, 1: 2, 2: 1, 3: 3}


def test_a_free_that_waits_for_another_stream_is_said_not_replayed(tmp_path, capsys):
    """``free_requested`` then, later, ``free_completed`` (a block another stream still used, ``record_stream``):
    ``memory_allocated()`` fell at the request, the block was free only at completion.  The tensors are read as
    PyTorch counts them; the blocks are not replayed, and a note says why.  And ``--plots`` draws a trace even then."""
    mib = 2**20
    trace = [{"action": "segment_alloc", "addr": 0, "size": 20 * mib}, {"action": "alloc", "addr": 0, "size": 4 * mib},
             {"action": "free_requested", "addr": 0, "size": 4 * mib},
             {"action": "alloc", "addr": 4 * mib, "size": 4 * mib},
             {"action": "free_completed", "addr": 0, "size": 4 * mib}]
    snapshot = {"segments": [{"address": 0, "total_size": 20 * mib, "blocks": [
        {"address": 0, "size": 4 * mib, "state": "inactive"},
        {"address": 4 * mib, "size": 4 * mib, "requested_size": 4 * mib, "state": "active_allocated"},
        {"address": 8 * mib, "size": 12 * mib, "state": "inactive"}]}], "device_traces": [trace]}
    report = explain_snapshot(snapshot)
    assert report.tensors == [0, 4 * mib, 0, 4 * mib, 4 * mib] and report.peak_bytes == 4 * mib
    assert report.allocated is None and any("another stream" in n for n in report.notes)
    path = tmp_path / "deferred.pickle"
    path.write_bytes(_pickled(snapshot))
    assert main(["explain", str(path), "--plots", str(tmp_path / "figures")]) == 0
    assert {p.name for p in (tmp_path / "figures").iterdir()} == {"timeline.png", "memory_map.png"}
    assert main(["explain", str(path), "--plots", str(path)]) == 2  # a file, not a folder: one line
    assert capsys.readouterr().err.endswith("cannot make that folder (File exists)\n")


def test_the_engines_own_frames_are_skipped():
    """The shipped snapshots were recorded under the course's tracker (``profile_step(device="cuda")``): its dispatch
    frames (``helpers/engine/counting.py``, ``torch/_ops.py``) say nothing, so ``where`` names the code that asked, and
    the backward pass's allocations are known by having no other Python frame."""
    report = explain_snapshot(ROOT / "lessons" / "data" / "snapshots" / "resnet18_b32_baseline.pickle.gz")
    places = {where(b.frames) for b in report.blocks if b.frames}
    assert not any("counting.py" in p or "_ops.py" in p for p in places)
    assert "(no Python frames: the backward pass's thread)" in places
    assert any(p.startswith("conv.py:") for p in places)


@pytest.mark.parametrize("config", ["baseline", "AMP", "offload"])
def test_a_cnn_snapshot_pairs_with_its_twin(config):
    """ResNet18 at batch 128 on the H200 beside its simulated twin: the zero-byte allocations the simulation logs (no
    block on a GPU) are left out, and the momentum buffers, kept on both sides until the harness drops the optimizer,
    pair; every simulated allocation of the fp32 runs finds its GPU twin, and what is left on the GPU side are cuDNN's
    workspaces (sizes no tensor has), allocated and freed at once."""
    from helpers import profile_step

    options = {"baseline": {}, "AMP": {"amp": True}, "offload": {"offload": True}}[config]
    step = profile_step("resnet18", 128, device="simulated", **options)
    name = {"baseline": "baseline", "AMP": "amp", "offload": "offload"}[config]
    twin = explain_snapshot(ROOT / "lessons" / "data" / "snapshots" / f"resnet18_b128_{name}.pickle.gz", step=step).twin
    log = step.allocation_log
    assert sum(a.kind == "alloc" and a.nbytes == 0 for a in log) >= 20
    assert all(log[i].nbytes > 0 for i in twin.missing)
    assert len(twin.missing) <= 9 and (config == "AMP" or not twin.missing)
    assert all(b.freed is not None and b.freed - b.allocated <= 2 for b in twin.extra if b.size > 2**20)
    gpu, simulated = twin.categories_gpu["activations"], step.categories["activations"]  # issue 51: "GPU 1.0 MiB"
    assert abs(gpu - simulated) <= max(0.02 * simulated, 2**20), (gpu, simulated)  # peaks a workspace apart
    momentum = [i for i, a in enumerate(log) if a.kind == "alloc" and a.category == "optimizer_states"]
    assert len(momentum) == 62 and not set(momentum) & set(twin.missing)  # the momentum buffers, all paired
    assert twin.aligned >= sum(a.kind == "alloc" and a.nbytes > 0 for a in log) - 9
