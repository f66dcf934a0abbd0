"""benchmarks/gpu_reference.py (make gpu-reference) and helpers.teaching.reference, without a GPU: its dry run, and
its cuda path on the stub driver."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from helpers import MiB, evaluated, profile_step, time_step
from helpers.allocator import replay
from helpers.teaching import reference
from helpers.teaching.reference import NOT_RECORDED, load_reference, module_differences, reference_report

ROOT = Path(__file__).resolve().parent.parent


def _harness():
    spec = importlib.util.spec_from_file_location("gpu_reference", ROOT / "benchmarks" / "gpu_reference.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look themselves up there
    spec.loader.exec_module(module)
    return module


harness = _harness()


#: The harness's runs but the 8B fine-tuning steps (about 35 s more; their dry run is in the slow group).
FAST_RUNS = tuple(run for run in harness.RUNS if run.model != harness.L8)


#: The one run of a dry run that ``time_step`` times for real (the others' timings: :class:`Timings`).
TIMED = "dropout MLP"


class Timings:
    """``time_step`` as a dry run of the harness meets it: what it was asked, run by run, and a stand-in's seconds.

    A dry run times each step untraced at full depth on the simulated backend (``time_step``: a warm-up and a timed
    step, as long as the traced step or longer: 27 of the 44 CPU seconds of :func:`dry_run`, 33 of the 67 of the three
    8B steps of :func:`test_the_fine_tuning_runs_dry`).  That figure is the simulation's own speed, which no test
    checks but for being positive; on a GPU the harness times the cuda step, which
    ``test_the_harness_measures_on_the_stub_driver_what_the_h200_measured`` runs, and ``time_step`` itself is tested in
    tests/test_step.py.  So the run named :data:`TIMED` is timed for real, and every other call is recorded and
    answered with a distinct stand-in (its index + 1 ms), which the record must then carry: each run asks for its own
    step (model, batch, options, simulated, one repeat in a dry run), once."""

    def __init__(self):
        self.calls = []

    def __call__(self, model, batch_size, **options):
        self.calls.append((model, batch_size, options))
        if options.get("name", model) == TIMED:
            return time_step(model, batch_size, **options)
        return len(self.calls) * 1e-3

    def check(self, runs, records) -> None:
        """Each of ``runs`` asked for its own step once, as the harness asks for it, and its record holds the answer."""
        asked = []
        for run in runs:
            model, options = harness._call(run)
            asked.append((model, run.batch_size, {**options, "device": "simulated", "repeats": 1}))
        assert self.calls == asked
        for i, (run, record) in enumerate(zip(runs, records, strict=True)):
            assert record["step_seconds"] > 0
            if run.model != TIMED:
                assert record["step_seconds"] == (i + 1) * 1e-3, run.key


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """The whole harness but the 8B runs, the simulated backend standing in for cuda (about 20 s of CPU; slow group),
    the untraced steps' timings but one answered by :class:`Timings`, which checks what the harness asked."""
    out = tmp_path_factory.mktemp("gpu-reference")
    timings = Timings()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(harness, "RUNS", FAST_RUNS)
        patch.setattr(harness, "time_step", timings)
        assert harness.main(["--dry-run", "--out", str(out)]) == 0
    timings.check(FAST_RUNS, json.loads((out / "gpu_reference.json").read_text())["runs"])
    return out


#: The runs whose simulated figures ``make test`` checks against the committed recording (the rest: slow group).
CHECKED_FAST = tuple(run for run in FAST_RUNS if run.batch_size == 128 or run.model in ("gpt2", "dropout MLP"))


@pytest.fixture(scope="module")
def fast_steps():
    """The simulated step of each of :data:`CHECKED_FAST`, by its key, made once for this file (a module fixture, set
    up before the autouse ``_no_shipped_logs``: where a symbolic log is shipped, evaluated from it, as ``make
    gpu-reference`` makes it, equal to a concrete trace by tests/test_shipped_logs.py; else traced): profile_step keeps
    them (``helpers.profile.KEPT``, 16 answers; these are 8), so that the harness, asked for one of them by a test that
    patches only its own names (``pytest.MonkeyPatch.context``, not the engine), reads the same profile again."""
    steps = {}
    for run in CHECKED_FAST:
        model, options = harness._call(run)
        steps[run.key] = profile_step(model, run.batch_size, device="simulated", **options)
    return steps


def test_the_dry_run_records_every_run_in_the_documented_format(dry_run):
    data = json.loads((dry_run / "gpu_reference.json").read_text())
    assert {"device", "torch", "cuda", "date", "runs"} <= set(data) and data["dry_run"] is True
    assert [(r["model"], r["batch_size"], r["config"]) for r in data["runs"]] == [run.key for run in FAST_RUNS]
    keys = {"model", "batch_size", "config", "cuda_peak_bytes", "simulated_peak_bytes", "cuda_reserved_bytes",
            "simulated_reserved_bytes", "step_seconds"}
    for run in data["runs"]:
        assert keys <= set(run) and run["error"] is None, run.get("error")
        assert run["cuda_peak_bytes"] == run["simulated_peak_bytes"] > 0  # the stand-in is the simulation
        assert run["step_seconds"] > 0 and run["events"]
        assert sum(gpu for _, _, gpu, _ in run["events"]) >= 0
    resnet = next(r for r in data["runs"] if (r["model"], r["batch_size"], r["config"]) == ("resnet18", 128, "AMP"))
    amp = profile_step("resnet18", 128, amp=True, device="simulated")
    assert resnet["simulated_peak_bytes"] == amp.peak_allocated_bytes
    assert resnet["simulated_reserved_bytes"] == replay(amp.allocation_log).peak_reserved > amp.peak_allocated_bytes
    mlp = next(r for r in data["runs"] if r["model"] == "dropout MLP")
    assert mlp["options"]["input_shape"] == [1, 28, 28]


def test_the_dry_run_writes_the_allocation_log_and_lists_the_tests(dry_run):
    log = json.loads((dry_run / harness.DRY_SNAPSHOT).read_text())
    kinds = {kind for _, kind, _, _, _ in log}
    assert kinds <= {"alloc", "free", "resize"} and "alloc" in kinds and "free" in kinds
    summary = (dry_run / "gpu_tests.txt").read_text().splitlines()
    assert summary[0].startswith("would run (unit tests): ") and " tests --junitxml " in summary[0]
    assert any(line.startswith("would run (lessons under nbval): ") for line in summary)


def test_a_second_run_resumes_and_records_nothing_again(dry_run, capsys):
    before = (dry_run / "gpu_reference.json").read_text()
    with pytest.MonkeyPatch.context() as patch:  # the harness's list, not the engine: the kept traces stay
        patch.setattr(harness, "RUNS", FAST_RUNS)
        assert harness.main(["--dry-run", "--out", str(dry_run), "--skip-tests"]) == 0
    assert (dry_run / "gpu_reference.json").read_text() == before
    assert "resnet18 b32" not in capsys.readouterr().out


def test_only_tries_again_the_failed_runs_it_selects(tmp_path, fast_steps):
    """A failed run's record stays until a run of the harness selects it (``--only``), which records it again.  (The
    MLP's simulated step and the dry snapshot's ResNet18 step at batch 128 are ``fast_steps``', kept.)"""
    mlp = next(run for run in FAST_RUNS if run.model == "dropout MLP")
    other = harness.Run("dropout MLP", 8, "a configuration that failed", mlp.options)
    header = {"device": "simulated (dry run)", "torch": torch.__version__, "cuda": torch.version.cuda, "date": "x",
              "dry_run": True}
    failed = [{"model": run.model, "batch_size": run.batch_size, "config": run.config, "error": "RuntimeError: x"}
              for run in (mlp, other)]
    (tmp_path / "gpu_reference.json").write_text(json.dumps({**header, "runs": failed}))
    with pytest.MonkeyPatch.context() as patch:  # the harness's list, not the engine: the kept traces stay
        patch.setattr(harness, "RUNS", [mlp, other])
        assert harness.main(["--dry-run", "--out", str(tmp_path), "--only", "steady state", "--skip-tests"]) == 0
    runs = {r["config"]: r for r in json.loads((tmp_path / "gpu_reference.json").read_text())["runs"]}
    assert runs["steady state"]["error"] is None
    assert runs["steady state"]["simulated_peak_bytes"] == fast_steps[mlp.key].peak_allocated_bytes > 0
    assert runs["a configuration that failed"]["error"] == "RuntimeError: x"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks what happens without a GPU")
def test_without_a_gpu_it_says_so_and_writes_nothing(tmp_path, capsys):
    assert harness.main(["--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("gpu-reference: no CUDA GPU on this machine")
    assert list(tmp_path.iterdir()) == []


def test_junit_failures_are_summarised(tmp_path):
    report = tmp_path / "report.xml"
    report.write_text('<testsuites><testsuite><testcase classname="tests.test_x" name="test_ok"/>'
                      '<testcase classname="tests.test_x" name="test_bad"><failure message="assert 1 == 2&#10;more"/>'
                      '</testcase></testsuite></testsuites>')
    assert harness.failures(report) == ["tests.test_x::test_bad: assert 1 == 2"]


def test_step_3_runs_its_commands_and_names_what_failed(tmp_path, monkeypatch):
    (tmp_path / "test_sample.py").write_text("import helpers\n\ndef test_ok():\n    pass\n\n"
                                             "def test_bad():\n    assert 1 == 2\n")
    junit = tmp_path / "report.xml"
    # Without the plugins a two-test file needs none of (nbval imports jsonschema's format checkers, about 2 s of
    # CPU; hypothesis's and xdist's about 1.5 s more); the harness's own commands are test_commands' (its dry run
    # lists them).
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:nbval", "-p", "no:xdist",
               "-p", "no:hypothesispytest", "-o", "addopts=", str(tmp_path / "test_sample.py"), "--junitxml",
               str(junit)]
    monkeypatch.setattr(harness, "test_commands", lambda out: [("sample", command)])
    summary = harness.run_tests(tmp_path, dry_run=False)
    assert summary[0].startswith("lessons not run: nbval is not installed here")  # one command, not two
    assert summary[1].startswith("sample: ") and "1 failed, 1 passed" in summary[1]
    assert len(summary) == 3 and summary[2].startswith("  FAILED ")  # the class name depends on pytest's rootdir
    assert summary[2].endswith("test_sample::test_bad: assert 1 == 2")


def test_the_lessons_report_the_recorded_figures(dry_run, tmp_path):
    path = dry_run / "gpu_reference.json"
    report = reference_report("resnet18", 128, path=path).splitlines()
    assert report[0].startswith("Recorded on a dry run: the simulated backend stood in for the GPU")
    assert len(report) == 3 + 5 + 1 and report[-1] == "every run within 2% of the GPU's peak"
    assert report[2].split() == ["run", "GPU", "simulated", "difference", "tensors"]  # reserved=False
    assert module_differences("resnet18", 128, "baseline", path=path).endswith("every event's delta agrees within 1.0 MiB")
    # A GPU that needs 5% more, and a convolution that holds a 64 MiB workspace:
    data = load_reference(path)
    run = next(r for r in data["runs"] if (r["model"], r["batch_size"], r["config"]) == ("resnet18", 128, "baseline"))
    run["cuda_peak_bytes"] = round(run["simulated_allocated_bytes"] * 1.05)
    conv1 = next(e for e in run["events"] if e[:2] == ["conv1", "fwd"])
    conv1[2] += 64 * MiB
    changed = tmp_path / "gpu_reference.json"
    changed.write_text(json.dumps(data))
    assert reference_report("resnet18", 128, path=changed).splitlines()[-1] == \
        "off by more than 2%: resnet18 b128 baseline"
    assert "(-4.76%)" in reference_report("resnet18", 128, path=changed)
    wide = reference_report("resnet18", 128, path=changed, reserved=True).splitlines()
    assert wide[1] == "Reserved, simulated: the replay's + the 64.0 MiB of cuBLAS workspaces the GPU held through every run."
    assert wide[3].split()[-2:] == ["GPU", "simulated"] and wide[4].split()[-3] == "-"  # a dry run: no GPU reserved
    assert float(wide[4].split()[-2]) * MiB == pytest.approx(run["simulated_reserved_bytes"] + 64 * MiB, abs=MiB / 20)
    assert " ".join(line.strip() for line in wide[-3:]) == f"Reserved: {reference.ADDRESS_NOTE}."
    lines = module_differences("resnet18", 128, "baseline", path=changed).splitlines()
    assert lines[2].split() == ["conv1", "fwd", "+456.0", "MiB", "+392.0", "MiB"]
    with pytest.raises(KeyError, match="no recorded run resnet18 b7 baseline"):
        module_differences("resnet18", 7, "baseline", path=changed)


def test_without_a_recording_the_lessons_say_how_to_make_one(tmp_path):
    assert load_reference(tmp_path / "none.json") is None
    assert reference_report(path=tmp_path / "none.json") == NOT_RECORDED
    assert "make gpu-reference" in NOT_RECORDED
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="not a GPU reference file"):
        load_reference(tmp_path / "bad.json")


def test_the_fine_tuning_runs_dry(tmp_path, shipped_logs):
    """Three of lesson 09's steps of Llama-3.1 8B through the harness: LoRA, and with checkpointing QLoRA on
    bitsandbytes' NF4 and LoRA on its LLM.int8() (slow group; their untraced timings stood in for, :class:`Timings`);
    ``--only`` matches a run's model and configuration.  With the shipped symbolic logs, as ``make gpu-reference``
    runs (and as :func:`dry_run`, a module fixture set up before the autouse ``_no_shipped_logs``, does): LoRA's step
    is evaluated from its shipped log (current by tests/test_shipped_logs.py, equal to a concrete trace where it was
    made, tools/ship_symbolic_logs.py; asserted here), not written concretely again (the test's CPU: 41 -> 37 s), and
    the two others, which have none, are written from shallow traces.  Only the harness's names are patched
    (``pytest.MonkeyPatch.context``, not the engine), so that profile_step keeps the steps made here:
    ``test_the_committed_recording_was_simulated_by_todays_engine[all]`` reads LoRA's and QLoRA's again."""
    configs = ("LoRA r16", "QLoRA r16, checkpointing", "LoRA r16 on LLM.int8(), checkpointing")
    chosen = [run for run in harness.RUNS if run.model == harness.L8 and run.config in configs]
    timings = Timings()  # the untraced 8B steps' timings (a third of its CPU) stood in for
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(harness, "RUNS", chosen + [run for run in FAST_RUNS if run.model == "gpt2"])
        patch.setattr(harness, "time_step", timings)
        assert harness.main(["--dry-run", "--out", str(tmp_path), "--only", "LoRA r16", "--skip-tests"]) == 0
    runs = json.loads((tmp_path / "gpu_reference.json").read_text())["runs"]
    timings.check(chosen, runs)  # and not GPT-2's
    assert [(r["model"], r["config"]) for r in runs] == [(harness.L8, c) for c in configs]  # not GPT-2's
    assert all(r["error"] is None and r["events"] for r in runs), [r["error"] for r in runs]
    plain, qlora, int8 = (r["simulated_peak_bytes"] for r in runs)
    assert qlora < int8 < plain
    steps = [profile_step(model, run.batch_size, device="simulated", **options)  # kept: the harness's own
             for run in chosen for model, options in [harness._call(run)]]
    assert [evaluated.was_evaluated(step) for step in steps] == [True, False, False]  # LoRA's log is shipped
    assert [step.peak_allocated_bytes for step in steps] == [plain, qlora, int8]


def _recorded_runs(keep):
    data = load_reference()
    if data is None or data.get("dry_run"):
        pytest.skip("no GPU recording committed in lessons/data")
    recorded = {(r["model"], r["batch_size"], r["config"]): r for r in data["runs"] if not r.get("error")}
    assert set(recorded) <= {run.key for run in harness.RUNS}  # no recorded run left out of the checks
    return [(run, recorded[run.key]) for run in harness.RUNS if keep(run) and run.key in recorded]


@pytest.mark.parametrize("which", ["fast", "all"])
def test_the_committed_recording_was_simulated_by_todays_engine(which, request):
    """The simulated column of lessons/data/gpu_reference.json, recorded on the GPU machine's own torch, is
    what the engine gives now, byte for byte (peak and reserved): the lessons set it beside their own figures.

    A change to the engine that moves one of these bytes must re-record (make gpu-reference, or at least
    re-simulate the file's runs). "fast" simulates the batch-128 ResNets, GPT-2 and the MLP (``fast_steps``). "all"
    (slow group) takes every other run's two figures from the dry run, which records them the same way
    (``_simulated_figures``), and the 8B runs: LoRA's (evaluated from its shipped log) and QLoRA's kept from the
    fine-tuning dry run (its test runs before this one), LoRA's with checkpointing traced here.
    """
    recorded_runs = _recorded_runs(lambda run: which == "all" or run in CHECKED_FAST)
    dry, steps = {}, {}
    if which == "all":
        data = json.loads((request.getfixturevalue("dry_run") / "gpu_reference.json").read_text())
        dry = {(r["model"], r["batch_size"], r["config"]): r for r in data["runs"]}
        assert set(dry) == {run.key for run in FAST_RUNS}
    else:
        steps = request.getfixturevalue("fast_steps")
        assert {run.key for run, _ in recorded_runs} <= set(steps)  # each read from there
    for run, recorded in recorded_runs:
        if run.key in dry:
            figures = dry[run.key]["simulated_peak_bytes"], dry[run.key]["simulated_reserved_bytes"]
        else:
            step = steps.get(run.key)
            if step is None:
                model, options = harness._call(run)
                step = profile_step(model, run.batch_size, device="simulated", **options)
            figures = step.peak_allocated_bytes, replay(step.allocation_log).peak_reserved
        assert figures == (recorded["simulated_peak_bytes"], recorded["simulated_reserved_bytes"]), run.key


def _trace_replay():
    spec = importlib.util.spec_from_file_location("gpu_trace_replay", ROOT / "benchmarks" / "gpu_trace_replay.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_real_gpus_trace_replayed_at_the_drivers_addresses_gives_its_reserved_memory(capsys):
    """The Llama-3.1 8B LoRA step recorded on an H200 (torch 2.11.0): its 9,997 allocations through the model."""
    replayer = _trace_replay()
    log, addresses, reserved = replayer.replay_inputs(replayer.DEFAULT)
    assert len(addresses) == 510 and reserved == 28_506 * MiB
    at_the_drivers = replay(log, segment_addresses=addresses)
    assert at_the_drivers.peak_reserved == reserved and at_the_drivers.allocator.num_device_alloc == 510
    own = replay(log)
    assert own.peak_reserved == 29_508 * MiB  # ascending addresses break ties otherwise
    # The script reads the same file and replays the same log both ways: it is handed the two replays above (each
    # about a second; the allocator model reads nothing but the log and the addresses), and must ask for those.
    replayed = {None: own, tuple(addresses): at_the_drivers}

    def replayed_above(again, segment_addresses=None):
        assert again == log
        return replayed[None if segment_addresses is None else tuple(segment_addresses)]

    replayer.replay = replayed_above  # this test's own copy of the module (_trace_replay)
    assert replayer.main([]) == 0
    out = capsys.readouterr().out
    assert "model, its own ascending addresses:          29508.0 MiB" in out
    assert "the driver's addresses:               28506.0 MiB (510 segments)" in out


def test_every_recorded_steps_trace_replayed_at_the_drivers_addresses_gives_its_reserved_memory():
    """The snapshot of each run's cuda step (lessons/data/snapshots/, recorded on an H200 on 2026-11-27): its trace,
    after the blocks live at its start, replayed through the allocator model at the driver's addresses ends at the
    memory the GPU had reserved, to the byte, for every one, cuDNN's workspaces and all."""
    replayer = _trace_replay()
    files = sorted((ROOT / "lessons" / "data" / "snapshots").glob("*.pickle.gz"))
    recorded = load_reference()
    if recorded is None or recorded.get("dry_run"):
        pytest.skip("no GPU recording committed in lessons/data")
    names = {harness.snapshot_name(run) for run in harness.RUNS}
    assert {f.name for f in files} <= names and len(files) == len(recorded["runs"])
    for path in files:
        log, addresses, reserved = replayer.replay_inputs(path)
        assert replay(log, segment_addresses=addresses).reserved[-1] == reserved, path.name


def test_segment_addresses_decide_which_of_two_equal_free_blocks_is_taken():
    from helpers.allocator import CachingAllocator

    for addresses, taken in (([2**40, 2**41], 2**40), ([2**41, 2**40], 2**40)):
        alloc = CachingAllocator(segment_addresses=addresses)
        first, second = alloc.malloc(30 * MiB), alloc.malloc(30 * MiB)
        alloc.free(first)
        alloc.free(second)
        assert alloc.malloc(30 * MiB).address == taken  # best fit, then the lowest address
    alloc = CachingAllocator(segment_addresses=[5 * 2**40])
    assert [alloc.malloc(30 * MiB).segment.address for _ in range(2)] == [5 * 2**40, 0]  # then the model's own


#: The harness's cuda path on the stub driver (tests/cuda_stub/, every kernel a no-op): GPT-2 in float32, whose
#: attention PyTorch runs with its own memory-efficient kernel (float16 would pick cuDNN's, which is not stubbed).
ON_STUB = """
import json, sys
sys.path.insert(0, "benchmarks")
import gpu_reference as g
g.warm_up_cublas()
(run,) = [r for r in g.RUNS if r.model == "gpt2" and r.config == "Adam, steady state"]
record = g.measure(run, "cuda", 1, g.Path(sys.argv[1]))
print(json.dumps(record))
"""


#: One run measured twice on the stub driver: its model built once on the GPU (the harness's default for a Hugging Face
#: config), and built on the CPU for each step.  The harness's LoRA options (``_LORA``) but a first step, not the
#: steady state: the build (where, how often) comes before the step, and a steady state only runs a second step of the
#: same built model (the subprocess's CPU: 44 s in the steady state, 31 s for a first step).
BUILT_ONCE = """
import contextlib, json, sys, torch
sys.path.insert(0, "benchmarks")
import gpu_reference as g
torch.backends.cuda.enable_cudnn_sdp(False)  # cuDNN is not stubbed
g.warm_up_cublas()
run = g.Run("HuggingFaceTB/SmolLM2-135M", 2, "LoRA r16", {"seq_len": 256, "lora_rank": 16, "param_dtype": "bfloat16",
            "amp": True, "amp_dtype": "bfloat16", "optimizer": "adamw"})
from helpers.models import hf
model, options = g._call(run)
g.profile_step(model, run.batch_size, device="simulated", **options)  # measure's simulated step, cached from here on
builds, build = [], hf.CausalLMBuilder._build
hf.CausalLMBuilder._build = lambda builder: builds.append(1) or build(builder)  # counts the real builds
before = torch.cuda.memory_allocated()  # the cuBLAS workspaces
with g.built_once_on_the_gpu(run.model):
    built_there = torch.cuda.max_memory_allocated() > before + 500 * 2**20 and torch.cuda.memory_allocated() == before
records, counts = [g.measure(run, "cuda", 1, g.Path(sys.argv[1]) / "once")], [len(builds)]
g.built_once_on_the_gpu = lambda model: contextlib.nullcontext()
records.append(g.measure(run, "cuda", 1, g.Path(sys.argv[1]) / "each"))
print(json.dumps([built_there, records, [counts[0] - 1, len(builds) - counts[0]]]))  # less the first with's
"""


def test_a_model_built_once_on_the_gpu_gives_the_same_record(cuda_stub, tmp_path):
    """``built_once_on_the_gpu`` (random initialisation on the GPU, where it is fast) changes nothing a run records: its
    model is built there once, kept in host memory and gone from the GPU, both steps of the run get copies of it, and
    the two records have the same peaks, reserved memory, events and snapshot allocations."""
    import subprocess

    from cuda_stub.build import stub_env

    done = subprocess.run([sys.executable, "-c", BUILT_ONCE, str(tmp_path)], capture_output=True, text=True,
                          timeout=600, cwd=ROOT, env=stub_env(cuda_stub))
    assert done.returncode == 0, done.stderr[-3000:]
    built_there, (once, each), builds = json.loads(done.stdout.splitlines()[-1])
    assert built_there and once["error"] is None
    assert builds == [1, 2]  # once on the GPU, copied for both steps; else a build for profile_step and time_step
    same = ("cuda_peak_bytes", "cuda_reserved_bytes", "events", "simulated_peak_bytes")
    assert {k: once[k] for k in same} == {k: each[k] for k in same}
    assert once["explained"]["allocations"] == each["explained"]["allocations"] > 1000


def test_the_harness_measures_on_the_stub_driver_what_the_h200_measured(cuda_stub, tmp_path):
    """``measure`` with the cuda backend, as ``make gpu-reference`` runs it on a GPU, on real CUDA tensors on the stub
    (``tests/test_real_step_on_stub.py``): its record has the committed recording's simulated columns, the events of
    both backends aligned, PyTorch's allocator's peak allocated equal to the allocator model's, and the H200's
    figures within 0.05% (its reserved to the byte, its allocated 12 KiB under the stub's); the run's snapshot,
    replayed through the allocator model at the driver's addresses, ends at the reserved memory it recorded."""
    import subprocess

    from cuda_stub.build import stub_env

    done = subprocess.run([sys.executable, "-c", ON_STUB, str(tmp_path)], capture_output=True, text=True, timeout=600,
                          cwd=ROOT, env=stub_env(cuda_stub))
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(done.stdout.splitlines()[-1])
    recorded = load_reference()
    if recorded is None or recorded.get("dry_run"):
        pytest.skip("no GPU recording in lessons/data/gpu_reference.json")
    (h200,) = [r for r in recorded["runs"] if r["model"] == "gpt2" and r["config"] == "Adam, steady state"]
    assert record["error"] is None and len(record["events"]) == len(h200["events"])
    simulated = ("simulated_peak_bytes", "simulated_allocated_bytes", "simulated_reserved_bytes")
    assert {k: record[k] for k in simulated} == {k: h200[k] for k in simulated}
    assert record["cuda_peak_bytes"] == record["simulated_allocated_bytes"]  # PyTorch's allocator and the model
    assert record["cuda_reserved_bytes"] == h200["cuda_reserved_bytes"]
    assert abs(record["cuda_peak_bytes"] - h200["cuda_peak_bytes"]) <= 0.0005 * h200["cuda_peak_bytes"]
    explained = record["explained"]  # the run's snapshot beside its simulated twin, as `helpers explain` reads it
    categories = explained["categories_at_peak_bytes"]
    assert categories["gpu"]["before_recording"] == 2 * 32 * MiB  # the workspaces of warm_up_cublas
    assert explained["peak_allocated_bytes"] - 2 * 32 * MiB == record["cuda_peak_bytes"]
    assert explained["aligned"] > 0.7 * explained["allocations"]
    assert sum(categories["gpu"].values()) == explained["peak_tensor_bytes"]["gpu"]
    assert {c: n for c, n in categories["gpu"].items() if n and c in categories["simulated"]} == \
        {c: n for c, n in categories["simulated"].items() if n}
    (path,) = tmp_path.glob("*.pickle.gz")
    assert path.name == "gpt2_b8_adam_steady_state.pickle.gz"
    replayer = _trace_replay()
    log, addresses, reserved = replayer.replay_inputs(path)
    assert reserved == record["cuda_reserved_bytes"] and len(log) > 1000
    assert replay(log, segment_addresses=addresses).peak_reserved == reserved


def _tables():
    spec = importlib.util.spec_from_file_location("gpu_tables", ROOT / "benchmarks" / "gpu_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_tables_harness_lists_resnet18s_convolutions_and_reductions():
    """Read on the meta device, ResNet18 at batch 32 calls the 11 distinct convolutions of the H200 table
    (``shared/reference/h200_cudnn``), conv1 first, and one biased Linear (fc, whose gradient sums 32 rows)."""
    tables = _tables()
    convs, linears = tables.convolutions({"resnet18": (32,)})
    assert len(convs) == 11
    assert {k: convs[0][k] for k in ("in_channels", "out_channels", "kernel", "stride", "padding", "side")} == \
        {"in_channels": 3, "out_channels": 64, "kernel": 7, "stride": 2, "padding": 3, "side": 224}
    assert {(c["in_channels"], c["out_channels"], c["kernel"], c["stride"], c["side"]) for c in convs} >= \
        {(64, 128, 1, 2, 56), (256, 512, 1, 2, 14), (512, 512, 3, 1, 7)}
    assert linears == [{"rows": 32, "features": 1000, "models": ["resnet18"]}]


def test_the_tables_harness_reads_a_fake_record_and_writes_the_table(tmp_path):
    """A made-up trace in the shape ``_record_memory_history(stacks="all")`` gives: the workspaces counted by pass from
    their C++ frames (the output is no workspace); a reduction's staging buffer told from its tensors; the JSON read
    back with its header and rows."""
    tables = _tables()

    def alloc(size, *names):
        return {"action": "alloc", "addr": size, "size": size, "frames": [{"name": n, "filename": "x.cpp"} for n in names]}

    conv = [alloc(100, "at::detail::empty_generic(...)", "at::native::cudnn_convolution(...)"),
            alloc(7, "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)",
                  "at::native::run_conv_plan(cudnnContext*)", "at::native::raw_cudnn_convolution_forward_out(...)",
                  "at::native::cudnn_convolution_forward(...)"),
            alloc(9, "at::native::run_conv_plan(cudnnContext*)", "at::native::cudnn_convolution_backward_weight(...)"),
            alloc(5, "at::native::run_single_conv(x)", "at::native::cudnn_convolution_backward_input(...)"),
            {"action": "free_requested", "addr": 9, "size": 9}]
    assert tables.workspaces_by_pass(conv) == {"forward": 7, "backward_weight": 9, "backward_input": 5}
    reduce = [alloc(4096, "at::detail::empty_generic(...)"), alloc(32, "at::native::gpu_reduce_kernel<...>(...)")]
    assert tables.reduction_allocs(reduce) == [[4096, "tensor"], [32, "reduce"]]
    head = tables.header("NVIDIA H200", "about")
    assert {"gpu", "cudnn", "cudnn_allow_tf32", "sms", "torch", "recorded"} <= set(head)
    rows = [{"batch": 32, "in_channels": 3, "dtype": "float16", "workspace": {"forward": 7}}]
    path = tmp_path / f"cudnn_workspaces_{tables.slug('NVIDIA H200')}.json"
    tables.write_table(path, head, rows)
    assert path.name == "cudnn_workspaces_h200.json"
    assert json.loads(path.read_text()) == {**head, "rows": rows}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks what happens without a GPU")
def test_the_tables_harness_without_a_gpu_says_so_and_writes_nothing(tmp_path, capsys):
    assert _tables().main(["--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == "gpu-tables: no CUDA GPU on this machine, nothing recorded"
    assert list(tmp_path.iterdir()) == []


def test_the_lessons_run_as_notebooks_with_times_and_the_budget_says_what_it_skips(tmp_path, monkeypatch):
    """``run_lessons`` on two tiny notebooks (one fails) within a budget, then with too little budget left: each
    run's status and seconds, the error's line, and what was skipped, said."""
    import nbformat

    tables = _tables()
    paths = []
    for name, code in (("ok", "print(6 * 7)"), ("bad", "1 / 0")):
        notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
        notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        paths.append(tmp_path / f"{name}.ipynb")
        nbformat.write(notebook, paths[-1])
    monkeypatch.setattr(tables, "ESTIMATE", {**tables.ESTIMATE, "lesson": 1.0})
    budget = tables.Budget(240)
    ok, bad = tables.run_lessons(budget, paths)
    assert ok["ok"] and ok["seconds"] > 0 and ok["error"] is None
    assert not bad["ok"] and "ZeroDivisionError" in bad["error"]
    assert budget.skipped == []
    late = tables.Budget(0.5)
    assert tables.run_lessons(late, paths) == [] and len(late.skipped) == 2
    assert late.skipped[0].startswith("lesson ok.ipynb (estimated 1 s, ")


def test_resimulated_with_the_table_the_runs_meet_the_h200(tmp_path):
    """``gpu_reference.py --resimulate`` on four recorded runs: with the H200's table, ResNet18's and lesson 02's
    dropout MLP's peak allocated (the allocator model's) within 0.5% of the GPU's and peak reserved within 5%; without
    it, today's figures.  The MLP's are the GPU's to the byte: its reduction's staging buffer, and each dropout's mask
    allocated before its output as CUDA's kernel does (else two 4 MiB blocks go unsplit to 3 MiB requests, +0.9%)."""
    data = json.loads(reference.REFERENCE_FILE.read_text())
    keep = {("resnet18", 32, "baseline"), ("resnet18", 32, "checkpoint 4"), ("resnet18", 32, "offload"),
            ("dropout MLP", 4096, "steady state")}
    data["runs"] = [r for r in data["runs"] if (r["model"], r["batch_size"], r["config"]) in keep]
    path = tmp_path / "gpu_reference.json"
    path.write_text(json.dumps(data))
    rows = harness.compare_with_tables(path)
    assert len(rows) == 4 and {r.mode for r in rows} == {"measured"} and not any(r.missing for r in rows)
    (mlp,) = [r for r in rows if r.label.startswith("dropout MLP")]
    assert mlp.allocated[2] == mlp.allocated[0] and mlp.reserved[2] == mlp.reserved[0]
    recorded = {f"{r['model']} b{r['batch_size']} {r['config']}": r for r in data["runs"]}
    for row in rows:
        assert abs(row.off(2)) <= 0.005 and abs(row.off(2, "reserved")) <= 0.05, row
        assert row.allocated[1] == recorded[row.label]["simulated_allocated_bytes"]  # without: today's
        assert row.reserved[1] == recorded[row.label]["simulated_reserved_bytes"] + 64 * MiB
    assert max(abs(r.off(1)) for r in rows) > 0.04  # checkpointing's gap, which the table closes
