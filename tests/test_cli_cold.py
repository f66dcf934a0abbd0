"""The command line's cold answer from a symbolic log on disk (:mod:`helpers.cli_cold`): from the log's plain form, no
torch, sympy, transformers, peft or bitsandbytes imported; from the log itself where there is no plain form, no
transformers, peft or bitsandbytes; either way the same answer as a concrete trace, line by line and in JSON.

SmolLM2's log, on the command line's default device (auto, where no GPU can be), is made the command line's own way
(``--batch-size 2,3``: traced symbolically at the second size, checked against the first and written to
``$GPU_MEMORY_SYMBOLIC_CACHE``); Llama-3.1 8B QLoRA's, on the simulated device, is the log of the same configuration
shipped with the package (``helpers/symbolic_logs/``, checked current, that is what today's code traces, by
``tests/test_shipped_logs.py``; its trace from scratch is compared with concrete traces and with this shipped log in
``tests/test_symbolic_equality.py``), written to ``$GPU_MEMORY_SYMBOLIC_CACHE`` as the command line writes a log
(:func:`helpers.symbolic_store.save`: the pickle and its plain form), which saves a second 8B symbolic trace.  Then a
fresh process asks one batch size inside the log's region.  Both tests trace concretely (and SmolLM2's symbolically,
half a minute), so they are in the slow group (``tests/conftest.py``); the fast ones check what the evaluation reads
of a shipped config, and that without a log the command line takes ``profile_step``'s route.
"""

import dataclasses
import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import cli_cold, hf_config, log_names, profile, symbolic_scope, symbolic_store
from helpers.__main__ import main
from helpers.config import StepConfig
from helpers.models import hf_spec, resolve_model
from helpers.models.resolve import shipped_task_spec

REPO = Path(__file__).resolve().parents[1]
SMOL = "HuggingFaceTB/SmolLM2-135M"
#: The libraries a cold answer must not import; from the log's plain form, not :data:`HEAVY` either.
UNIMPORTED = ("transformers", "peft", "bitsandbytes", "torchvision", "matplotlib", "ipywidgets")
HEAVY = ("torch", "sympy")
#: ``main`` run in a fresh process, then the names of :data:`UNIMPORTED` and :data:`HEAVY` it imported, as JSON, the
#: last line on stderr.
WRAPPER = ("import json, sys\n"
           "from helpers.__main__ import main\n"
           "code = main(sys.argv[1:])\n"
           "sys.stdout.flush()\n"
           f"print(json.dumps([m for m in {UNIMPORTED + HEAVY!r} if m in sys.modules]), file=sys.stderr)\n"
           "sys.exit(code)\n")
#: :data:`WRAPPER` with the plain form not read (:func:`helpers.cli_cold.from_plain` answers None): the log itself.
NOT_PLAIN = "import helpers.cli_cold\nhelpers.cli_cold.from_plain = lambda options: None\n" + WRAPPER


def _fresh(logs: Path, *argv: str, wrapped: bool = True, plain: bool = True) -> tuple[str, list[str] | None]:
    """``python -m helpers ARGV`` (``wrapped``: :data:`WRAPPER`, which also says what was imported; not ``plain``:
    :data:`NOT_PLAIN`) in a fresh process with its symbolic logs in ``logs``: its stdout, and the watched libraries it
    imported (None unwrapped)."""
    env = {**os.environ, "GPU_MEMORY_SYMBOLIC_CACHE": str(logs),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    wrapper = WRAPPER if plain else NOT_PLAIN
    command = [sys.executable, "-c", wrapper, *argv] if wrapped else [sys.executable, "-m", "helpers", *argv]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
    assert run.returncode == 0, run.stderr
    return run.stdout, json.loads(run.stderr.strip().splitlines()[-1]) if wrapped else None


def _here(capsys, *argv: str) -> str:
    """``main(ARGV)`` in this process: its stdout."""
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def _same_profile(plain, symbolic) -> None:
    """``plain`` (read from a log's plain form) is ``symbolic`` (evaluated from the log) in every field, but that a
    storage's dtype is its name."""
    named = {s: dataclasses.replace(v, dtype=str(v.dtype).removeprefix("torch.")) for s, v in symbolic.storages.items()}
    assert plain.storages == named
    assert dataclasses.replace(plain, storages={}) == dataclasses.replace(symbolic, storages={})


def _cold_against_concrete(capsys, monkeypatch, logs: Path, step: list[str], batch_sizes: tuple[int, ...],
                           shipped: StepConfig | None = None) -> None:
    """Make ``step``'s log the command line's way (the symbolic steps and their plain form), or write the log shipped
    with the package of ``shipped`` (``step``'s configuration) as the command line writes one, then at each of
    ``batch_sizes``: the cold answer in a fresh process imports none of :data:`UNIMPORTED` and :data:`HEAVY`, and
    equals byte for byte the answer from the log itself (which imports none of :data:`UNIMPORTED`) and the answer of
    ``profile_step``'s own route from the same log; its JSON equals a concrete trace's (no logs on disk) byte for byte,
    and so does its text but for the line that says how it was obtained (a concrete step's note, then how it was
    evaluated)."""
    if shipped is not None:
        monkeypatch.setenv("GPU_MEMORY_SYMBOLIC_CACHE", str(log_names.SHIPPED))  # the shipped directory alone
        steps = symbolic_store.load(shipped, resolve_model(shipped.model))
        assert steps, f"no shipped log of {shipped}: run `make symbolic-logs` (tools/ship_symbolic_logs.py)"
    monkeypatch.setenv("GPU_MEMORY_SYMBOLIC_CACHE", str(logs))
    profile.forget_kept()
    if shipped is not None:
        assert symbolic_store.save(shipped, steps)
    else:
        _here(capsys, "profile", *step, "--batch-size", "2,3")
    assert sorted(f.suffix for f in logs.iterdir()) == [".json", ".pickle"]  # the same name: helpers.log_names
    assert len({f.stem for f in logs.iterdir()}) == 1
    for b in batch_sizes:
        argv = ("profile", *step, "--batch-size", str(b))
        text, imported = _fresh(logs, *argv)
        as_json, _ = _fresh(logs, *argv, "--json", wrapped=False)
        assert imported == [], f"a cold answer from the log's plain form imported {imported}"
        from_log, imported = _fresh(logs, *argv, plain=False)
        assert from_log == text
        assert set(imported) <= set(HEAVY), f"a cold answer from the log on disk imported {imported}"
        with monkeypatch.context() as route:  # profile_step's own route from the log (transformers imported)
            route.setattr(cli_cold, "from_disk", lambda options: None)
            profile.forget_kept()
            assert _here(capsys, *argv) == text
        monkeypatch.setenv("GPU_MEMORY_SYMBOLIC_CACHE", "off")
        profile.forget_kept()
        concrete, concrete_json = _here(capsys, *argv), _here(capsys, *argv, "--json")  # the second kept
        monkeypatch.setenv("GPU_MEMORY_SYMBOLIC_CACHE", str(logs))
        assert as_json == concrete_json
        lines, concrete_lines = text.splitlines(), concrete.splitlines()
        differ = [i for i, (a, c) in enumerate(zip(lines, concrete_lines)) if a != c]
        assert len(lines) == len(concrete_lines) and len(differ) == 1, differ
        cold, traced = lines[differ[0]], concrete_lines[differ[0]]
        assert traced.startswith("  simulated: ") and cold.startswith(traced + ", traced once with symbolic sizes; "
                                                                      f"evaluated at batch {b}, sequence "), cold


@pytest.mark.parametrize("name", [*hf_config.SHIPPED, *hf_config.FOR_LOGS])
def test_what_an_evaluation_reads_of_a_shipped_config_is_what_transformers_makes_of_it(name):
    """The spec read from a shipped config.json with json (``shipped_task_spec``) has the name, vocabulary, context
    and required sequence length of the spec resolved through transformers (``hf_spec``), and its dtype as the
    command line's default (``json_dtype``) is the one transformers' config gives."""
    light, full = shipped_task_spec(name), hf_spec(name)
    if "text_config" in hf_config.shipped_json(name):  # Gemma-3's: a multimodal config nests its sizes
        assert light is None
    else:
        for field in ("name", "vocab_size", "seq_len", "seq_len_required", "input_shape", "num_classes"):
            assert getattr(light, field) == getattr(full, field), field
        assert light.blocks is None and light.at_depth is None  # never given to a trace
        assert shipped_task_spec(name, "mine").name == resolve_model(name, name="mine").name == "mine"
    loaded = hf_config.load_config(name)
    expected = str(getattr(loaded, "dtype", None) or "").removeprefix("torch.")
    assert hf_config.json_dtype(hf_config.shipped_json(name)) == expected


def test_other_models_and_configs_have_no_light_spec(tmp_path):
    """Only a shipped name has one: a config.json path, a Hub name, a preset or a dict takes transformers' route."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(hf_config.shipped_json(SMOL)))
    for model in (str(path), "someorg/somemodel", "gpt2", "resnet18", hf_config.shipped_json(SMOL)):
        assert shipped_task_spec(model) is None and hf_config.shipped_json(model) is None
    assert hf_config.json_dtype({"torch_dtype": "half"}) == "float16"
    assert hf_config.json_dtype({"dtype": "bfloat16", "torch_dtype": "float16"}) == "bfloat16"
    assert hf_config.json_dtype({}) == ""
    import torch

    for name in hf_config.DTYPE_NAMES:  # said without torch: each is torch's own name of its dtype
        assert str(getattr(torch, name)) == f"torch.{name}" and hf_config.json_dtype({"dtype": name}) == name


def test_no_log_on_disk_leaves_the_answer_to_profile_step(symbolic_logs):
    """Without a log on disk, ``from_disk`` answers None (the command line then asks profile_step, as before), and so
    it does for a model that is not a shipped config; a bad option is refused as profile_step refuses it."""
    options = dict(model=SMOL, batch_size=2, seq_len=16, device="simulated")
    assert cli_cold.from_disk(options) is None
    assert not symbolic_logs.exists() or not any(symbolic_logs.iterdir())
    assert cli_cold.from_disk({**options, "model": "gpt2"}) is None
    with pytest.raises(ValueError, match="unknown option"):
        cli_cold.from_disk({**options, "nonsense": 1})


def test_a_cold_answer_of_smollm2_imports_no_transformers_and_equals_a_concrete_trace(capsys, monkeypatch, tmp_path):
    """SmolLM2's first step at 16 tokens with SGD (cheap), on the command line's default device, auto, where no GPU can
    be here: at batch 5, in the region of the log made at 2 and 3; at batch 1 (its own regime, not in the log) the
    command line takes profile_step's route, transformers imported.  The plain form's profile is the log's, field by
    field; it answers only a step of the device that the log holds (the key names the device: a simulated step has
    its own log).  A step asked with ``--device simulated`` takes the same cold route: the 8B test below holds it.
    (This test made a second SmolLM2 log the same way, one device each, that is a second symbolic trace, half this
    test's time.)"""
    assert symbolic_scope.cuda_ruled_out(), "this test needs a machine without a GPU"
    step = ["--model", SMOL, "--seq-len", "16", "--first-step", "--optimizer", "sgd", "--device", "auto"]
    _cold_against_concrete(capsys, monkeypatch, tmp_path / "logs", step, (5,))
    options = dict(model=SMOL, batch_size=1, seq_len=16, steady_state=False, optimizer="sgd", device="auto",
                   param_dtype="bfloat16")
    assert cli_cold.from_disk(options) is None  # batch 1 is another program: not in the log
    assert cli_cold.from_disk({**options, "batch_size": 5, "full_trace": True}) is None
    assert cli_cold.from_disk({**options, "batch_size": 5}) is not None
    plain = cli_cold.from_plain({**options, "batch_size": 5})
    with monkeypatch.context() as route:  # the log itself, without its plain form
        route.setattr(cli_cold, "from_plain", lambda options: None)
        _same_profile(plain, cli_cold.from_disk({**options, "batch_size": 5}))
    for other in ({"batch_size": 1}, {"batch_size": 5, "full_trace": True}, {"batch_size": 5, "device": "simulated"}):
        assert cli_cold.from_plain({**options, **other}) is None  # another regime; a trace asked; simulated's own log
        assert cli_cold.from_disk({**options, **other}) is None


def test_cuda_is_ruled_out_only_where_torch_sees_no_gpu(monkeypatch):
    """Without importing torch, ``device="auto"`` is known to be simulated only where torch would say so: on Linux
    without a GPU's device files, and on macOS; never on Windows, nor with a GPU's device file present."""
    import torch

    if symbolic_scope.cuda_ruled_out():
        assert not torch.cuda.is_available()
    monkeypatch.setattr(sys, "platform", "darwin")
    assert symbolic_scope.cuda_ruled_out()
    monkeypatch.setattr(sys, "platform", "win32")
    assert not symbolic_scope.cuda_ruled_out()
    monkeypatch.setattr(sys, "platform", "linux")
    for present in symbolic_scope.GPU_DEVICE_FILES:
        monkeypatch.setattr(glob, "glob", lambda pattern, present=present: [pattern] if pattern == present else [])
        assert not symbolic_scope.cuda_ruled_out(), present
    monkeypatch.setattr(glob, "glob", lambda pattern: [])
    assert symbolic_scope.cuda_ruled_out() == os.path.isdir("/dev")


_8B_LORA = ["--model", "meta-llama/Llama-3.1-8B", "--seq-len", "2048", "--amp", "--amp-dtype", "bfloat16",
            "--lora-rank", "16", "--checkpoint", "1", "--device", "simulated"]


def test_a_cold_answer_of_an_8b_step_equals_a_concrete_trace(capsys, monkeypatch, tmp_path):
    """Llama-3.1 8B QLoRA (bitsandbytes' NF4 with double quantization, which the cold answer must not import), steady
    state, checkpointing, 2,048 tokens, bfloat16 parameters, AdamW and the next-token loss (lessons 09 and 09b's step,
    whose log is shipped; the libraries' default optimizer would be fused AdamW, which is not): at batch 4 and 7, from
    the shipped log written as the command line writes one (the module's text says why).  (The LoRA step takes the
    same route: the SmolLM2 test above holds it, at a tenth of the cost.)"""
    step = [*_8B_LORA, "--quantization", "nf4", "--double-quant", "--optimizer", "adamw", "--loss", "next_token",
            "--param-dtype", "bfloat16"]
    shipped = StepConfig(model="meta-llama/Llama-3.1-8B", batch_size=4, seq_len=2048, amp=True, amp_dtype="bfloat16",
                         lora_rank=16, checkpoint=1, quantization="nf4", double_quant=True, optimizer="adamw",
                         loss="next_token", param_dtype="bfloat16", steady_state=True, device="simulated")
    _cold_against_concrete(capsys, monkeypatch, tmp_path / "logs", step, (4, 7), shipped=shipped)
