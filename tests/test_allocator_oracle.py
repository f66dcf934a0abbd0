"""PyTorch's own caching allocator as the oracle for the model (issue 23).

The pinned CUDA wheel's compiled allocator (``libc10_cuda.so``) runs on a
machine with no GPU when the CUDA runtime, driver and NVML under it are a test
double: ``tests/cuda_stub/cuda_stub.c``, compiled once per test session with
the system ``cc`` (the ``cuda_stub`` fixture of ``tests/conftest.py``,
``tests/cuda_stub/build.py``) into a temporary directory as ``libcuda.so.1`` (and ``libnvidia-ml.so.1``, the
same file) and loaded with ``LD_PRELOAD`` in a subprocess only
(``tests/cuda_stub/oracle.py``), never in this process.  ``LD_PRELOAD`` is
enough: ``libc10_cuda.so`` asks for ``cudaMalloc@libcudart.so.13`` (versioned),
and the dynamic linker binds a versioned reference to an unversioned
definition of a preloaded library; the driver entry points come through
``cudaGetDriverEntryPointByVersion``, which the stub also answers, and
``libcuda.so.1``/``libnvidia-ml.so.1``, which PyTorch ``dlopen``s, are found
first on ``LD_LIBRARY_PATH``.

Random allocation logs go through both, and after every operation the two must
agree on ``memory_allocated()``, ``memory_reserved()``, whether it ran out of
memory, and the snapshot (segments in address order, each with its size,
allocated bytes, pool, whether expandable, and its blocks' sizes, states and
requested sizes).  ``ALLOCATOR_ORACLE_OPS`` sets the operations per setting
(default 10,000).  PyTorch's side of every setting and every translated test
runs in one subprocess (the ``pytorch_states`` fixture), which imports torch once and
runs each log in a child forked before CUDA is initialised: a fresh allocator
each time, set by its ``PYTORCH_CUDA_ALLOC_CONF`` and the stub's capacity as a
process started with them is (oracle.py says how).  Each state is one line of
compact JSON (oracle.py's ``state_line``), written by PyTorch's side as it goes
and made the same way from the model's side: the two agree after an op when
their lines are the same string.

Skipped, with the reason, where it cannot run: not Linux, no C compiler, a
CPU-only torch wheel, or no CUDA headers in the wheel's packages.
"""

import json
import os
import random
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from helpers.allocator import AllocatorOutOfMemory, AllocatorSettings, CachingAllocator
from cuda_stub.build import STUB, stub_env
from cuda_stub.oracle import state_line

MiB, GiB = 2**20, 2**30
OPS = int(os.environ.get("ALLOCATOR_ORACLE_OPS", "10000"))


def pytorch_job(out: Path, ops: list, conf: str, capacity: int, total: int | None = None,
                fraction: float | None = None) -> dict:
    """A job for oracle.py: ``ops`` through PyTorch's allocator, set by ``conf`` (``PYTORCH_CUDA_ALLOC_CONF``) and a
    memory ``fraction``, on a stub that hands out ``capacity`` bytes and reports ``total``; its states written to
    ``out``."""
    return {"ops": ops, "fraction": fraction, "out": str(out),
            "env": {"STUB_CUDA_CAPACITY": str(capacity), "STUB_CUDA_TOTAL": str(total or capacity),
                    "PYTORCH_CUDA_ALLOC_CONF": conf}}


def run_pytorch(stub: Path, jobs: list[dict]) -> None:
    """Each job's states after every op through PyTorch's allocator on the stub, written to its ``out`` file (one
    :func:`state_line` per op): one subprocess that imports torch once and runs each job in a fresh allocator, in a
    child forked before CUDA is initialised (see oracle.py)."""
    done = subprocess.run([sys.executable, str(STUB / "oracle.py")], input=json.dumps(jobs),
                          capture_output=True, text=True, env=stub_env(stub), timeout=1200)
    assert done.returncode == 0, f"PyTorch on the stub failed ({done.returncode}):\n{done.stderr[-3000:]}"


def run_model(ops: list, conf: str, capacity: int, total: int | None = None,
              fraction: float | None = None) -> list[str]:
    """The same states through :class:`helpers.allocator.CachingAllocator`, each its :func:`state_line`."""
    alloc, live, states = CachingAllocator(capacity, conf, total, fraction), {}, []
    for op in ops:
        oom = False
        if op[0] in ("alloc", "tensor"):
            try:
                live[op[1]] = alloc.malloc(op[2])
            except AllocatorOutOfMemory:
                oom = True
        elif op[0] == "free":
            block = live.pop(op[1], None)
            if block is not None:
                alloc.free(block)
        elif op[0] == "empty_cache":
            alloc.empty_cache()
        elif op[0] == "settings":  # the model's spelling, where it differs, comes second
            alloc.settings = AllocatorSettings.parse(op[-1])
        elif op[0] == "fraction":
            alloc.set_per_process_memory_fraction(op[1])
        else:
            raise ValueError(f"unknown op {op!r}")
        segments = [[s["total_size"], s["allocated_size"], s["is_expandable"], s["segment_type"] == "small",
                     [[b["size"], b["state"], b["requested_size"] if b["state"] == "active_allocated" else 0]
                      for b in s["blocks"]]] for s in alloc.snapshot()]
        states.append(state_line([oom, alloc.allocated, alloc.reserved, segments]))
    return states


def random_log(seed: int, n: int, largest: int = 200 * MiB, live: int = 24) -> list:
    """``n`` random ops: allocations (small, 1-10 MiB, up to ``largest``; a few of 0 bytes),
    frees (about ``live`` tensors alive on average) and, rarely, ``empty_cache``."""
    rng = random.Random(seed)
    ops, alive, next_id = [], [], 0
    for _ in range(n):
        if rng.random() < 0.01:
            ops.append(["empty_cache"])
        elif alive and rng.random() < len(alive) / (len(alive) + live):
            ops.append(["free", alive.pop(rng.randrange(len(alive)))])
        else:
            kind = rng.random()
            size = (0 if kind < 0.01 else rng.randint(1, MiB) if kind < 0.4 else
                    rng.randint(MiB + 1, 10 * MiB) if kind < 0.7 else rng.randint(10 * MiB, largest))
            ops.append(["alloc", next_id, size])
            alive.append(next_id)
            next_id += 1
    return ops


def compare(real: list[str], model: list[str], ops: list) -> tuple[int, str]:
    """How many states agree (the same :func:`state_line`), and the first disagreement in words ('' when none)."""
    agree = sum(r == m for r, m in zip(real, model))
    first = next((i for i, (r, m) in enumerate(zip(real, model)) if r != m), None)
    if first is None:
        return agree, ""
    r, m = json.loads(real[first]), json.loads(model[first])
    return agree, (f"first disagreement after op {first} {ops[first]}: PyTorch (oom, allocated, reserved, "
                   f"segments) = {r[:3]}, {len(r[3])}; model = {m[:3]}, {len(m[3])}")


# (conf, capacity the stub hands out, total it reports, per-process memory fraction, largest request)
SETTINGS = {
    "defaults": ("", 8 * GiB, None, None, 200 * MiB),
    "max_split_size_mb": ("max_split_size_mb:64", 1 * GiB, None, None, 200 * MiB),
    "max_non_split_rounding_mb": ("max_split_size_mb:40,max_non_split_rounding_mb:64", 1 * GiB, None, None, 200 * MiB),
    "expandable_segments": ("expandable_segments:True", 8 * GiB, None, None, 200 * MiB),
    "roundup_power2_divisions": ("roundup_power2_divisions:4", 8 * GiB, None, None, 200 * MiB),
    "roundup_power2_divisions_list": ("roundup_power2_divisions:[2:8,64:2,>:4]", 8 * GiB, None, None, 200 * MiB),
    "memory_fraction": ("", 2 * GiB, 2 * GiB, 0.3, 200 * MiB),
    "memory_fraction_expandable": ("expandable_segments:True", 2 * GiB, 2 * GiB, 0.3, 200 * MiB),
    "per_process_memory_fraction": ("per_process_memory_fraction:0.3", 2 * GiB, 2 * GiB, None, 200 * MiB),
    "small_capacity": ("", 384 * MiB, None, None, 120 * MiB),
    "small_capacity_expandable": ("expandable_segments:True", 384 * MiB, None, None, 120 * MiB),
}


def setting_log(setting: str) -> list:
    """The random log of ``setting``: :data:`OPS` operations, seeded by its name."""
    return random_log(sum(map(ord, setting)), OPS, SETTINGS[setting][-1])


@pytest.fixture(scope="module")
def pytorch_states(cuda_stub, tmp_path_factory) -> dict[str, Path]:
    """The files of PyTorch's states after every op, by setting and by translated test (:data:`SETTINGS`,
    :data:`PYTORCH_TESTS`), from one subprocess: each from a fresh allocator, set as a process started with that
    setting is; and, under :data:`REFUSALS`, the file of which :data:`BAD_SETTINGS` PyTorch refuses.
    (Files of lines, read by each test: the eleven settings' states together are millions of lists,
    which the tests compare as lines and never parse but where a check looks at one.)"""
    out = tmp_path_factory.mktemp("oracle")
    jobs = {setting: pytorch_job(out / f"setting_{i}.jsonl", setting_log(setting), *SETTINGS[setting][:4])
            for i, setting in enumerate(SETTINGS)}
    jobs.update({name: pytorch_job(out / f"test_{i}.jsonl", ops, conf, CAPACITY, TOTAL)
                 for i, (name, (ops, conf, _)) in enumerate(PYTORCH_TESTS.items())})
    jobs[REFUSALS] = {"refusals": BAD_SETTINGS, "out": str(out / "refusals.json")}  # see refused_by_pytorch
    run_pytorch(cuda_stub, list(jobs.values()))
    return {name: Path(job["out"]) for name, job in jobs.items()}


def states(files: dict[str, Path], name: str) -> list[str]:
    """PyTorch's states after every op of the setting or translated test ``name``, from :func:`pytorch_states`'s
    file: one :func:`state_line` each."""
    return files[name].read_text().splitlines()


class Parsed(Sequence):
    """States given as lines (:func:`state_line`), each read back as ``[oom, allocated, reserved, segments]`` when
    it is looked at (a translated test's checks look at a few of them)."""

    def __init__(self, lines: list[str]):
        self.lines = lines

    def __len__(self) -> int:
        return len(self.lines)

    def __getitem__(self, i: int) -> list:
        return json.loads(self.lines[i])


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_the_model_agrees_with_pytorch_op_by_op(pytorch_states, setting):
    conf, capacity, total, fraction, largest = SETTINGS[setting]
    ops = setting_log(setting)
    real = states(pytorch_states, setting)
    model = run_model(ops, conf, capacity, total, fraction)
    agree, first = compare(real, model, ops)
    print(f"{setting}: {agree}/{len(ops)} ops agree; out of memory {sum(r.startswith('[true,') for r in real)} times")
    assert agree == len(ops), first
    assert len(real) == len(ops) == OPS


# -- PyTorch's own allocator tests, translated ------------------------------------------
# The tests of test/test_cuda.py (class TestCuda and TestCudaMallocAsync) and
# test/test_cuda_multigpu.py (_test_memory_stats_generator) that are allocations,
# frees, empty_cache, settings and a memory fraction, as op lists: a tensor of n
# bytes is ["tensor", id, n] (torch.empty(n, dtype=uint8)), a Python rebinding
# allocates the new tensor before it frees the old one.  Each one runs through
# PyTorch on the stub, which must pass the original test's own checks
# ("expect"), and through the model, which must agree op by op.  The card: 8 GiB
# of which 512 MiB go to a CUDA context, as on a GPU.
# Not translated: test_garbage_collect_expandable (garbage_collection_threshold,
# which the model refuses), test_cachingAllocator_raw_alloc
# (caching_allocator_enable(False)), test_notifies_oom (an OOM observer),
# test_get_per_process_memory_fraction and test_allocator_memory_fraction_setting
# (no allocation), and every test of streams, events, graphs or pinned memory.

TOTAL = 8 * GiB
CAPACITY = TOTAL - 512 * MiB


def _memory_snapshot_ops():
    rng = random.Random(0)  # the test's randint order, reproducibly
    ops = [["tensor", 0, 2 * 311 * 411 * 4], ["free", 0], ["tensor", 1, 310 * 410 * 4], ["tensor", 2, 311 * 411 * 4]]
    small = list(range(10, 1010))
    ops += [["tensor", i, 128 * 4] for i in small]
    while small:
        ops.append(["free", small.pop(rng.randint(0, len(small) - 1))])
    ops += [["tensor", 3, 128 * 5 * 4], ["free", 3], ["free", 1], ["free", 2], ["empty_cache"]]
    return ops


def _allocator_settings_ops():
    n, big = 21 * MiB * 4, 100 * MiB * 4
    gc = "garbage_collection_threshold:0.5"  # no effect without a memory fraction (malloc checks set_fraction)
    return [["empty_cache"], ["settings", ""], ["tensor", 0, n], ["settings", "roundup_power2_divisions:4"],
            ["tensor", 1, n], ["settings", gc, ""], ["settings", gc + ",max_split_size_mb:40", "max_split_size_mb:40"],
            ["empty_cache"], ["tensor", 2, n], ["empty_cache"],
            ["settings", gc + ",roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]",
             "roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]"],
            ["tensor", 3, n], ["empty_cache"], ["tensor", 4, big], ["empty_cache"],
            ["settings", "release_lock_on_cudamalloc:True", ""],  # locking only: the model has none
            ["tensor", 5, n], ["free", 3]]


def _allocator_fuzz_ops():
    rng, ops, mem, total, c = random.Random(123), [], [], 0, 0  # random.seed(123), N = 10000
    for _ in range(10000):
        while total >= 1024 * 1024 * 1024 / (4 * 10):
            ident, numel = mem.pop(rng.randrange(0, len(mem)))
            ops.append(["free", ident])
            total -= numel
        action = rng.choices(["alloc", "free", "empty_cache"], weights=[1, 1 if mem else 0, 0.1])[0]
        if action == "alloc":
            b = rng.randrange(2 * 1024 * 1024 // 4, 20 * 1024 * 1024 // 4)
            ops.append(["tensor", c, 4 * b])  # torch.full((b,), c, dtype=torch.int32)
            mem.append((c, b))
            c += 1
            total += b
        elif action == "free":
            ident, numel = mem.pop(rng.randrange(0, len(mem)))
            ops.append(["free", ident])
            total -= numel
        else:
            ops.append(["empty_cache"])
    return ops


def _memory_stats_generator_ops(n=35):
    ops, ids = [], iter(range(10**6))

    def alloc(*size):  # torch.cuda.FloatTensor(*size)
        i = next(ids)
        numel = 1
        for s in size:
            numel *= s
        ops.append(["tensor", i, 4 * numel])
        return i

    tensors1 = [alloc(1), alloc(10, 20), alloc(200, 300, 2000)]
    tensors2 = [alloc(i, i * 4) for i in range(1, n // 2 + 1)]
    tensors2 += [alloc(i, i * 7, i * 9, i * 11) for i in range(5, n // 2 + 5)]
    tensors2.append(alloc(0, 0, 0))
    order = list(range(len(tensors2)))
    random.Random(0).shuffle(order)  # torch.randperm
    tensors2 = [tensors2[i] for i in order]
    for i in range(n // 2):
        ops.append(["free", tensors2.pop(i)])
    tensors2 += [alloc(i, i * 3, i * 8) for i in range(2, 2 * n // 3 + 2)]
    ops += [["free", i] for i in tensors2] + [["free", i] for i in tensors1] + [["empty_cache"]]
    return ops


def _oom_at(real, *indices):
    return [i for i, s in enumerate(real) if s[0]] == list(indices)


# name: (ops, PYTORCH_CUDA_ALLOC_CONF at start, the original test's checks on PyTorch's states)
PYTORCH_TESTS = {
    "test_memory_allocation": ([["alloc", 0, 1], ["free", 0]], "",
                               lambda r: r[0][1] > 0 and r[1][1] == 0),
    "test_memory_stats": ([["tensor", 0, 1024], ["free", 0], ["empty_cache"]], "",
                          lambda r: r[0][1] == 1024 and r[2][1:3] == [0, 0]),
    "test_out_of_memory": ([["tensor", 0, 4096], ["tensor", 1, 1024**3 * 800000000], ["tensor", 2, 1024**3 * 8000000000]],
                           "", lambda r: _oom_at(r, 1, 2)),
    "test_out_of_memory_retry": ([["empty_cache"], ["tensor", 0, TOTAL // 2], ["tensor", 1, TOTAL // 2], ["free", 0],
                                  ["tensor", 1, TOTAL // 2], ["free", 1], ["empty_cache"]], "",
                                 lambda r: _oom_at(r, 2)),
    "test_set_per_process_memory_fraction": (
        [["tensor", 0, 4096], ["empty_cache"], ["fraction", 0.5], ["tensor", 1, int(TOTAL * 0.499) - 2 * MiB],
         ["free", 1], ["empty_cache"], ["tensor", 2, int(TOTAL * 0.5)], ["fraction", 1.0]], "",
        lambda r: _oom_at(r, 6)),
    "test_memory_snapshot": (_memory_snapshot_ops(), "",
                             lambda r: any(b[2] == 311 * 411 * 4 for s in r[1003][3] for b in s[4])
                             and r[-1][1:3] == [0, 0]),
    "test_max_split_expandable": (
        [["empty_cache"], ["fraction", 120 * MiB / TOTAL], ["settings", "expandable_segments:False,max_split_size_mb:40"],
         ["tensor", 0, 40 * MiB], ["settings", "expandable_segments:True,max_split_size_mb:40"], ["tensor", 1, 40 * MiB],
         ["settings", "expandable_segments:False,max_split_size_mb:40"], ["tensor", 2, 40 * MiB],
         ["tensor", 3, 40 * MiB], ["free", 0], ["free", 1], ["free", 2], ["tensor", 4, 120 * MiB], ["free", 4],
         ["fraction", 1.0]], "", lambda r: _oom_at(r, 8)),
    "test_allocator_settings": (
        _allocator_settings_ops(), "",
        lambda r: [b - a for a, b in ((r[1][1], r[2][1]), (r[3][1], r[4][1]), (r[7][1], r[8][1]), (r[10][1], r[11][1]),
                                      (r[12][1], r[13][1]))] == [84 * MiB, 96 * MiB, 84 * MiB, 88 * MiB, 512 * MiB]),
    "test_raises_oom[max_split_size_mb_setting=False]": ([["tensor", 0, 4 * 1024**4]], "", lambda r: _oom_at(r, 0)),
    "test_raises_oom[max_split_size_mb_setting=True]": (
        [["settings", "max_split_size_mb:1024"], ["empty_cache"], ["tensor", 0, 4 * 1024**4]], "",
        lambda r: _oom_at(r, 2)),
    "test_allocator_fuzz": (_allocator_fuzz_ops(), "", lambda r: not any(s[0] for s in r)),
    "test_cuda_multigpu._test_memory_stats_generator": (
        _memory_stats_generator_ops(), "", lambda r: r[-2][1] == 0 and r[-1][1:3] == [0, 0]),
}


@pytest.mark.parametrize("name", list(PYTORCH_TESTS))
def test_pytorchs_own_allocator_tests_agree(pytorch_states, name):
    ops, conf, expect = PYTORCH_TESTS[name]
    real = states(pytorch_states, name)
    assert expect(Parsed(real)), f"the translation of {name} does not pass on PyTorch itself"
    agree, first = compare(real, run_model(ops, conf, CAPACITY, TOTAL), ops)
    print(f"{name}: {agree}/{len(ops)} ops agree")
    assert agree == len(ops), first


#: :func:`pytorch_states`' key of the job that asks PyTorch which of :data:`BAD_SETTINGS` it refuses.
REFUSALS = "refusals"
BAD_SETTINGS = ["foo:1,bar:2", "garbage_collection_threshold:1.2", "max_split_size_mb:2",
                "release_lock_on_cudamalloc:none", "pinned_use_cuda_host_register:none",
                "pinned_num_register_threads:none", "pinned_num_register_threads:1024"]


@pytest.fixture(scope="module")
def refused_by_pytorch(pytorch_states) -> list[bool]:
    """For each of BAD_SETTINGS, whether PyTorch raises ValueError: a job of :func:`pytorch_states`' subprocess
    (oracle.py's ``run_refusals``, in a child of its own, as each job), not a second process that imports torch for
    it (about 2.5 s of CPU).  The stub is loaded there but not needed: setting the allocator's settings does not
    initialise CUDA."""
    return json.loads(pytorch_states[REFUSALS].read_text())


@pytest.mark.parametrize("conf", BAD_SETTINGS)
def test_test_allocator_settings_refusals_are_refused_by_both(refused_by_pytorch, conf):
    """test_allocator_settings' bad settings: PyTorch raises ValueError, and so does the model."""
    assert refused_by_pytorch[BAD_SETTINGS.index(conf)]
    with pytest.raises(ValueError):
        AllocatorSettings.parse(conf)
