"""pytest configuration shared by the unit tests and nbval.

nbval compares each stored cell output with a fresh run, strictly, after the
substitutions in sanitize_output.cfg, stderr included: the committed lessons
print nothing there, so a new warning in a lesson fails its cell.

Each lesson is executed once: after nbval's last cell of a notebook, its
exercise solutions run in the same kernel as items of their own
(``lessons/01_mini_batching.ipynb::Solution 1``; ``lesson_runner.add_exercise_solutions``).

The slow groups (:data:`SLOW`) carry the ``slow`` marker: ``make test`` leaves
them out (``-m "not slow"``), ``make test-slow`` runs them, ``make test-all`` (which
``.ci/run`` runs) runs both in one session, the heaviest files first (:data:`COSTS`).

The unit tests share one simulated ResNet18 step at batch 128 (the lessons'
running example), made once per session, and one compiled stub driver
(``cuda_stub``), the test double of the CUDA runtime under PyTorch's own CUDA
code (issue 23).
"""

import pytest

from lesson_runner import add_exercise_solutions

#: The slow groups: a test file, or a test in it (``file::test``, or one parameter ``file::test[id]``), and why.
SLOW = {
    "tests/test_site.py": "the website built with Sphinx and every page opened in Chromium",
    "tests/test_browser.py": "every lesson opened in JupyterLab in Chromium, each widget driven",
    "tests/test_allocator_oracle.py": "PyTorch's allocator on the stub driver, 10,000 operations per setting",
    "tests/test_whole_step_reference.py": "whole steps through PyTorch's CUDA dispatch on the stub driver",
    "tests/test_real_step_on_stub.py": "whole steps on real CUDA tensors on the stub driver, snapshots recorded",
    "tests/test_gpu_reference.py::test_the_harness_measures_on_the_stub_driver_what_the_h200_measured":
        "the harness's cuda path, GPT-2 at batch 8 x 1,024, on the stub driver",
    "tests/test_published.py::test_the_fast_rows_land_where_their_rows_say": "published figures: 7B models traced",
    "tests/test_fits.py::test_every_widget_judges_as_profile_step_and_the_command_line":
        "random widget configurations (5 with its seed, at most 16), each judged by its widget, by profile_step and "
        "by the command line, drawn until each widget and model, the command line beside each widget, both answers "
        "and both bases are covered",
    "tests/test_widget_finetune.py::test_the_largest_batch_is_a_traced_fit_and_one_more_is_not":
        "the fine-tuning widget's search, every step of it traced",
    "tests/test_widget_finetune.py::test_the_longest_sequence_is_a_traced_fit_and_one_step_more_is_not":
        "the fine-tuning widget's search, every step of it traced",
    "tests/test_short_paths.py::test_short_path_runs_without_the_skipped_sections": "partial lessons run again",
    "tests/test_depth.py::test_a_full_size_step_written_equals_its_full_trace":
        "7-8B steps traced in full (others at 8 of their blocks)",
    "tests/test_walk.py::test_a_written_step_then_one_evaluated_each_go_down":
        "GPT-2 medium written, then traced with symbolic sizes, every call recorded (sys.settrace)",
    "tests/test_vllm_written.py::test_every_setup_written_equals_its_full_trace_to_the_byte":
        "14 setups of vLLM's profile run (7-8B and 70B models) traced in full and written",
    "tests/test_vllm_written.py::test_the_first_quantized_run_of_a_process_counts_what_the_next_ones_do":
        "a fresh Python process imports transformers, bitsandbytes and peft",
    "tests/test_symbolic_equality.py::test_a_guard_bounds_the_region":
        "GPT-2 traced with symbolic sizes (the full-size GPT-2 case's trace where both run)",
    "tests/test_cli_cold.py::test_a_cold_answer_of_smollm2_imports_no_transformers_and_equals_a_concrete_trace":
        "SmolLM2 traced with symbolic sizes (30 s), then answered in two fresh processes and concretely",
    "tests/test_cli_cold.py::test_a_cold_answer_of_an_8b_step_equals_a_concrete_trace":
        "Llama-3.1 8B QLoRA's shipped log answered cold in fresh processes, and traced concretely, at two batch sizes",
    "tests/test_symbolic_equality.py::test_a_full_size_step_evaluated_equals_its_concrete_trace":
        "MobileNetV2, GPT-2, SmolLM2, the Llama preset, Qwen2.5 7B and Llama-3.1 8B LoRA traced with symbolic sizes "
        "(8B QLoRA's shipped log read), and concretely at drawn points",
    "tests/test_symbolic_equality.py::test_a_cheap_step_evaluated_equals_its_concrete_trace[tiny Llama, AMP float16 (GradScaler), AdamW, steady state, seed 50]":
        "a small step traced symbolically and concretely (make test's budget: two of its kind stay fast)",
    "tests/test_symbolic_equality.py::test_a_cheap_step_evaluated_equals_its_concrete_trace[tiny Qwen2, LoRA, checkpointing, bfloat16 parameters, seed 50]":
        "a small step traced symbolically and concretely (make test's budget: two of its kind stay fast)",
    "tests/test_symbolic_equality.py::test_a_cheap_step_evaluated_equals_its_concrete_trace[tiny Llama, the chunked loss, seed 50]":
        "a small step traced symbolically and concretely (make test's budget: two of its kind stay fast)",
    "tests/test_symbolic_equality.py::test_a_cheap_step_evaluated_equals_its_concrete_trace[tiny Llama, QLoRA (bitsandbytes' NF4), seed 50]":
        "a small step traced symbolically and concretely (make test's budget: two of its kind stay fast)",
    "tests/test_symbolic_equality.py::test_the_chunked_loss_holds_where_the_sequence_makes_eight_chunks":
        "the chunked loss's region checked sequence length by sequence length",
    "tests/test_symbolic_property.py::test_many_small_steps_evaluated_equal_their_concrete_traces":
        "20 random small steps, each traced with symbolic sizes and concretely at three points",
    "tests/test_shipped_logs.py::test_a_shipped_log_evaluated_at_a_drawn_point_equals_a_concrete_trace":
        "shipped logs of a CNN, Llama-3.1 8B LoRA and a published 7B setup evaluated and traced concretely",
    "tests/test_widget_serving.py::test_quantized_weights_reach_vllm_startup_and_a_65b_model_starts_in_nf4":
        "the serving widget: LLaMA 65B's profile run traced in bfloat16 and in NF4",
    "tests/test_widget_serving.py::test_the_gpus_menu_shows_one_gpus_account_and_vllms_refusals":
        "the serving widget: LLaMA 65B's profile run traced on one GPU and on one GPU's shard of 2",
    "tests/test_vllm_groups.py::test_the_engine_beside_the_sliding_logs":
        "vLLM's profile run traced for Gemma-2 2B, 9B, 27B, Gemma-3 4B, 12B, 27B and Gemma 7B (large vocabularies)",
    "tests/test_vllm_groups.py::test_the_gemma3_rows_as_close_as_measured":
        "the same rows (one module fixture): Gemma-3's text run and SigLIP encoder traced",
    "tests/test_published.py::test_the_65b_rows_gap_states_what_its_peak_holds":
        "LLaMA 65B's QLoRA step evaluated from its shipped log, three variants of it written concretely",
    "tests/test_published.py::test_the_unsloth_rows_gap_states_its_figures":
        "Llama-3.1 8B QLoRA's shipped log evaluated, and the step without k-bit preparation written concretely",
    "tests/test_published.py::test_the_mistral_rows_gap_states_its_figures":
        "Mistral-7B QLoRA's shipped log evaluated at batch 4 and 8, and batch 4 written concretely",
    "tests/test_step.py::test_no_storage_of_a_simulated_step_waits_for_the_cycle_collector":
        "five steps with Python's cycle collector run at every 100th allocation",
    # make gpu-reference without a GPU: every run of the harness traced on the simulated backend (one of them also
    # timed; the others' untraced timings stood in for: Timings in the file); the committed recording's simulated
    # columns are then checked against what that dry run recorded
    "tests/test_gpu_reference.py::test_the_dry_run_records_every_run_in_the_documented_format": "the harness, dry",
    "tests/test_gpu_reference.py::test_the_dry_run_writes_the_allocation_log_and_lists_the_tests": "the harness, dry",
    "tests/test_gpu_reference.py::test_a_second_run_resumes_and_records_nothing_again": "the harness, dry",
    "tests/test_gpu_reference.py::test_the_lessons_report_the_recorded_figures": "the harness's dry recording",
    "tests/test_gpu_reference.py::test_the_fine_tuning_runs_dry":
        "three 8B steps through the harness (LoRA's evaluated from its shipped log, two written)",
    "tests/test_gpu_reference.py::test_a_model_built_once_on_the_gpu_gives_the_same_record":
        "a SmolLM2 step measured twice on the stub driver",
    "tests/test_gpu_reference.py::test_the_committed_recording_was_simulated_by_todays_engine[all]":
        "the committed recording against the dry run and the two 8B steps",
}


#: helpers.symbolic_store.VARIABLE, written out so that pytest starts without importing torch
#: (tests/test_symbolic.py checks that the two agree).
SYMBOLIC_LOGS = "GPU_MEMORY_SYMBOLIC_CACHE"


def pytest_configure(config):
    """Symbolic logs on disk (:mod:`helpers.symbolic_store`) in a directory of this session's own, empty at its start
    and removed at its end, so that no run reads another's logs (hermetic CI): set in the environment, which the
    lessons' kernels inherit."""
    import os
    import tempfile

    config._symbolic_logs = tempfile.mkdtemp(prefix="symbolic-logs-")
    config._symbolic_logs_before = os.environ.get(SYMBOLIC_LOGS)
    os.environ[SYMBOLIC_LOGS] = config._symbolic_logs


def pytest_unconfigure(config):
    """Remove this session's symbolic logs (:func:`pytest_configure`) and restore the environment."""
    import os
    import shutil

    if getattr(config, "_symbolic_logs", None):
        shutil.rmtree(config._symbolic_logs, ignore_errors=True)
        if config._symbolic_logs_before is None:
            os.environ.pop(SYMBOLIC_LOGS, None)
        else:
            os.environ[SYMBOLIC_LOGS] = config._symbolic_logs_before


#: helpers.log_names.SHIPPED_VARIABLE, written out likewise (tests/test_shipped_logs.py checks that the two agree).
SHIPPED_LOGS = "GPU_MEMORY_SHIPPED_LOGS"


@pytest.fixture(autouse=True)
def _no_shipped_logs():
    """A unit test reads no symbolic logs shipped with the package (``helpers/symbolic_logs/``,
    :func:`helpers.log_names.directories`), only its session's own directory: what it checks (a first question
    answered concretely, a log written and read back, the command line without a log) is what a machine without them
    does.  The lessons' kernels, which nbval starts outside any test, read them, as a learner's do; a test asks for
    them with the ``shipped_logs`` fixture.  (Set in ``os.environ`` itself: ``monkeypatch`` here would make every test
    forget the kept profiles, :func:`_traced_anew_when_patched`.)"""
    import os

    before = os.environ.get(SHIPPED_LOGS)
    os.environ[SHIPPED_LOGS] = "off"
    yield
    if before is None:
        os.environ.pop(SHIPPED_LOGS, None)
    else:
        os.environ[SHIPPED_LOGS] = before


@pytest.fixture
def shipped_logs(_no_shipped_logs):
    """The symbolic logs shipped with the package read again, after the session's own directory (:func:`_no_shipped_logs`
    is undone for this test)."""
    import os

    os.environ.pop(SHIPPED_LOGS, None)


@pytest.fixture
def symbolic_logs(tmp_path, monkeypatch):
    """An empty directory of symbolic logs on disk for one test (``$GPU_MEMORY_SYMBOLIC_CACHE``), nothing kept in the
    process: a test of what is written and read back."""
    from helpers import profile

    monkeypatch.setenv(SYMBOLIC_LOGS, str(tmp_path / "symbolic"))
    profile.forget_kept()
    yield tmp_path / "symbolic"
    profile.forget_kept()


#: Worker-seconds of the test files that cost 10 or more in a run on this project's 2-core machine (``make test-all``
#: under CI's CPU setting, version 0.15.0): (its tests in ``make test``, its tests in the slow groups), each item's
#: setup, call and teardown summed
#: (``tools/test_costs.py`` prints this table from runs with ``--durations=0``).  Read only to hand the files to the
#: workers heaviest first (:func:`heaviest_files_first`): a stale figure costs minutes, never a result.
COSTS = {
    "tests/test_symbolic_equality.py": (12, 219),
    "tests/test_depth.py": (49, 164),
    "tests/test_real_step_on_stub.py": (0, 188),
    "tests/test_browser.py": (0, 156),
    "tests/test_gpu_reference.py": (17, 104),
    "tests/test_published.py": (0, 116),
    "tests/test_symbolic_property.py": (17, 49),
    "tests/test_widget_finetune.py": (16, 39),
    "tests/test_cli_cold.py": (0, 49),
    "tests/test_short_paths.py": (0, 44),
    "tests/test_vllm_written.py": (6, 37),
    "tests/test_allocator_oracle.py": (0, 35),
    "tests/test_whole_step_reference.py": (0, 34),
    "tests/test_site.py": (0, 32),
    "tests/test_step.py": (19, 12),
    "tests/test_walk.py": (1, 26),
    "tests/test_cli_hf.py": (24, 0),
    "tests/test_fits.py": (0, 23),
    "tests/test_widgets.py": (23, 0),
    "tests/test_symbolic.py": (18, 3),
    "tests/test_techniques.py": (18, 0),
    "tests/test_sharding.py": (17, 0),
    "tests/test_cli.py": (17, 0),
    "tests/test_vllm_groups.py": (1, 16),
    "tests/test_polynomial.py": (16, 0),
    "tests/test_snapshot.py": (16, 0),
    "tests/test_models.py": (16, 0),
    "tests/test_bitsandbytes.py": (15, 0),
    "tests/test_shipped_logs.py": (4, 10),
    "tests/test_serving.py": (13, 0),
    "tests/test_check.py": (12, 0),
    "tests/test_finetune_engine.py": (10, 0),
}


def slow_reason(nodeid: str) -> str | None:
    """Why the test ``nodeid`` (``file::test[id]``) is in the slow groups (:data:`SLOW`), or None where it is not."""
    file, _, rest = nodeid.partition("::")
    for key in (file, f"{file}::{rest.split('[')[0]}", f"{file}::{rest}"):
        if key in SLOW:
            return SLOW[key]
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Add the exercise solutions to their lessons' nbval items, mark the slow groups, and put the heaviest files
    first.

    A hook of the whole session (``tryfirst``: before ``-k`` and ``-m`` select),
    so it sees the lessons' items too, which this directory's hooks do not.
    """
    add_exercise_solutions(items)
    for item in items:
        if slow_reason(item.nodeid) is not None:
            item.add_marker(pytest.mark.slow)
    marks = " ".join(config.option.markexpr.split())
    items[:] = heaviest_files_first(items, fast=marks != "slow", slow=marks != "not slow")


def heaviest_files_first(items: list, fast: bool = True, slow: bool = True) -> list:
    """``items`` with whole files reordered, each file's own items in their order, the heaviest file first, counting
    the groups that run (``fast``: ``make test``'s tests, ``slow``: the slow groups'): a lesson weighs its run-all's
    seconds (the instructor guide's, ``tools/lesson_minutes.py``), a test file in :data:`COSTS` its figures there,
    another a tenth of a second a test.

    pytest-xdist's ``--dist loadfile`` hands each worker a whole file at a time, in this order when
    ``--no-loadscope-reorder`` is given (``make test``, ``make test-slow``, ``make test-all``): a file is work no
    worker can share, so the longest ones start first and the many short ones fill in beside them, rather than one
    running alone at the end (longest processing time first).  Without that option xdist orders the files by their
    number of items.
    """
    import pathlib
    import sys

    tools = str(pathlib.Path(__file__).resolve().parent.parent / "tools")
    if tools not in sys.path:
        sys.path.insert(0, tools)
    from lesson_minutes import measured

    run_all = {number: seconds for number, (seconds, _) in measured().items()}
    weight: dict[str, float] = {}
    for item in items:
        file = item.nodeid.partition("::")[0]
        if file.startswith("lessons/"):
            weight[file] = run_all.get(pathlib.PurePath(file).name.split("_", 1)[0], 0.0)
        elif file in COSTS:
            weight[file] = fast * COSTS[file][0] + slow * COSTS[file][1]
        elif slow if item.get_closest_marker("slow") is not None else fast:
            weight[file] = weight.get(file, 0.0) + 0.1
    return sorted(items, key=lambda item: -weight.get(item.nodeid.partition("::")[0], 0.0))


@pytest.fixture(autouse=True, scope="module")
def _traced_anew_per_file():
    """Each test file starts with no kept profiles (``helpers.profile.KEPT``): its tests share what they trace, in their
    order, whatever else ran before in the same worker."""
    from helpers import profile

    profile.forget_kept()


@pytest.fixture(autouse=True)
def _traced_anew_when_patched(request):
    """A test that patches (``monkeypatch``, the engine perhaps) neither reads nor leaves kept profiles."""
    from helpers import profile

    patched = "monkeypatch" in request.fixturenames
    if patched:
        profile.forget_kept()
    yield
    if patched:
        profile.forget_kept()


@pytest.fixture(scope="session")
def resnet18_b128():
    """One simulated training step of ResNet18 at batch 128 (SGD with momentum, first step)."""
    from helpers import profile_step

    return profile_step("resnet18", 128, device="simulated")


@pytest.fixture(scope="session")
def cuda_stub(tmp_path_factory):
    """The directory holding the compiled stub driver as ``libcuda.so.1`` and
    ``libnvidia-ml.so.1`` (``tests/cuda_stub/build.py``), built once per session.

    Skips, with the reason, where it cannot be built: not Linux, no C
    compiler, a CPU-only torch wheel, or no CUDA headers in the wheel's packages.
    """
    from cuda_stub import build

    reason = build.why_not()
    if reason is not None:
        pytest.skip(reason)
    try:
        return build.build(tmp_path_factory.mktemp("cuda_stub"))
    except RuntimeError as e:  # a compiler error is a failure, not a skip
        pytest.fail(str(e))


def pytest_terminal_summary(terminalreporter):
    """Say in one line what the browser test did not check when it was skipped (not just "N skipped")."""
    reasons = []
    for report in terminalreporter.stats.get("skipped", []):
        if "test_browser.py" in report.nodeid and isinstance(report.longrepr, tuple):
            reason = report.longrepr[2].removeprefix("Skipped: ")
            if reason not in reasons:
                reasons.append(reason)
    for reason in reasons:
        terminalreporter.write_line(reason, yellow=True, bold=True)
