"""python -m helpers profile: output, JSON, and one-line errors for bad input."""

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import config, hf_config, profile_step
from helpers.__main__ import main
from helpers.flags import CLI_OPTIONS


def test_the_answer_comes_first_and_the_table_only_on_request(capsys):
    """The peak, the step, the verdict per card, where the peak is reached and what fills it, in that order, in a
    few lines; the per-module table follows only with --table."""
    from helpers.gpus import GPU_CARDS
    from helpers.units import fmt_mib

    args = ["profile", "--model", "resnet18", "--image-size", "64", "--device", "simulated"]
    assert main(args) == 0
    out = capsys.readouterr().out.splitlines()
    steady = profile_step("resnet18", 128, image_size=64, device="simulated", steady_state=True)
    assert out[0] == f"peak allocated: {fmt_mib(steady.peak_allocated_bytes)} (simulated)"
    assert out[1].startswith("  of the steady-state training step") and "batch 128 of 3x64x64 images" in out[1]
    assert out[2] == "does it fit? peak allocated of the whole step + 1,024.0 MiB assumed overhead + the lines below:"
    assert [line.split("  ")[1] for line in out[3:3 + len(GPU_CARDS)]] == list(GPU_CARDS)
    reached = out.index(f"peak reached by event {steady.peak_event}, {steady.peak.label}")
    assert 3 + len(GPU_CARDS) < reached < 8 + len(GPU_CARDS)  # after the cards' lines (cuBLAS, cuDNN)
    assert out[reached + 1] == "what fills it at the peak:"
    categories = out[reached + 2:reached + 2 + len(steady.categories)]
    assert [line.split()[0] for line in categories] == list(steady.categories)
    assert out[-1] == f"the step module by module ({len(steady.events):,} events): add --table"
    assert len(out) < 25 and not any(" conv1 " in line for line in out)  # no table
    assert main([*args, "--table"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[:len(out) - 1] == out[:-1] and table[len(out) - 1].endswith("events): below")
    conv1 = next(line for line in table if " fwd " in line and " conv1 " in line)
    assert "+32.0" in conv1 and "(128, 64, 32, 32)" in conv1
    assert len(table) == len(out) + 1 + len(steady.events)  # the header, then one line per event


def test_help_shows_examples_that_parse_as_written():
    from helpers.__main__ import EXAMPLES, _parser

    help_text = subprocess.run([sys.executable, "-m", "helpers", "profile", "--help"], capture_output=True,
                               text=True, timeout=120, cwd=REPO).stdout
    assert EXAMPLES in help_text and "examples:" in help_text
    commands = [line.strip() for line in EXAMPLES.replace("\\\n", "").splitlines()
                if line.strip().startswith("python -m helpers")]
    assert len(commands) >= 5
    for command in commands:  # each parses as written (the own-model one names a module to write)
        _parser().parse_args(shlex.split(command)[3:])


def test_json_has_the_documented_fields(capsys):
    assert main(["profile", "--batch-size", "8", "--image-size", "64", "--optimizer", "adam", "--json",
                 "--device", "simulated"]) == 0
    data = json.loads(capsys.readouterr().out)
    for key in ("backend", "model", "batch_size", "peak_allocated_bytes", "events", "categories"):
        assert key in data
    assert data["backend"] == "simulated" and data["model"] == "resnet18" and data["batch_size"] == 8
    assert set(data["categories"]) >= {"parameters", "gradients", "optimizer_states", "activations"}
    root = [e for e in data["events"] if e["module"] == ""]
    assert [e["phase"] for e in root] == ["pre", "fwd", "bwd"]
    conv1 = next(e for e in data["events"] if e["module"] == "conv1" and e["phase"] == "fwd")
    assert conv1["delta_bytes"] == 8 * 64 * 32 * 32 * 4
    for e in data["events"]:
        assert set(e) >= {"module", "phase", "allocated_bytes", "delta_bytes"}
    # The peak is reached inside an operation, between the event before peak_event and peak_event:
    # at least the highest event, and above everything allocated before that moment.
    allocated = [e["allocated_bytes"] for e in data["events"]]
    peak, at = data["peak_allocated_bytes"], data["peak_event"]
    assert peak >= max(allocated)
    assert peak > max(allocated[:at]) and allocated[at - 1] <= peak
    assert peak == profile_step("resnet18", 8, image_size=64, optimizer="adam", device="simulated",
                                steady_state=True).peak_allocated_bytes  # the steady state: the default


@pytest.mark.parametrize("args, message", [
    (["--batch-size", "0"], "--batch-size: must be at least 1, got 0"),
    (["--batch-size", "-5"], "must be at least 1"),
    (["--batch-size", "many"], "expected an integer"),
    (["--batch-size", "4-2"], "a range goes up, like 1-64, got '4-2'"),
    (["--batch-size", "0-3"], "must be at least 1, got 0"),
    (["--batch-size", "1-5000"], "at most 1024 batch sizes, got 5,000 in '1-5000'"),
    (["--batch-size", "1,,2"], "expected an integer, integers like 1,2,4,8 or a range like 1-64"),
    (["--batch-size", "2,4", "--table"], "--table lists one step module by module: give one --batch-size"),
    (["--model", "resnet1000"], "unknown model 'resnet1000'; use a preset (mlp, gpt2, gpt2-medium"),
    (["--optimizer", "lion"], "invalid choice: 'lion'"),
    (["--model", "vit_b_16", "--checkpoint", "3"], "VisionTransformer is not one"),
    (["--model", "gpt2", "--input-shape", "3"], "gpt2 takes token ids"),
    (["--model", "gpt2", "--seq-len", "8", "--num-classes", "5"], "--num-classes applies to a classification loss"),
    (["--model", "resnet18", "--seq-len", "8"], "token inputs need a vocabulary: give --vocab-size with --seq-len"),
    (["--model", "helpers.models:no_such_function"], "'helpers.models' has no function 'no_such_function'"),
    (["--reentrant"], "--reentrant applies to checkpointing: give --checkpoint segments too"),
    (["--model", "mlp", "--step-in-backward", "--amp"],
     "--step-in-backward cannot unscale float16 gradients (GradScaler): use --amp-dtype bfloat16, or no AMP"),
    (["--model", "mlp", "--lora-targets", "fc"], "--lora-targets and --lora-dropout apply to LoRA: give --lora-rank"),
    (["--model", "mlp", "--quantization", "nf4"], "--quantization (QLoRA) quantizes the frozen base weights"),
    (["--model", "mlp", "--quantization", "torchao-nf4", "--lora-rank", "4", "--double-quant"],
     "--double-quant (bitsandbytes' double quantization) applies to --quantization nf4 or --quantization fp4"),
    (["--model", "mlp", "--optimizer", "adamw8bit", "--fused"], "--fused applies to torch.optim's optimizers"),
    (["--model", "mlp", "--optimizer-offload", "--step-in-backward"],
     "--optimizer-offload steps on the host after backward: it cannot step inside backward (--step-in-backward)"),
    (["--model", "mlp", "--vocab-size", "8"], "--vocab-size applies to token inputs: give --seq-len too"),
    (["--model", "gpt2", "--image-size", "64"], "--image-size applies to image inputs; gpt2 takes token ids"),
])
def test_bad_input_exits_with_one_line(capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        code = main(["profile", "--device", "simulated", *args])
        raise SystemExit(code)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    python_names = [name for _, name, _ in CLI_OPTIONS if "_" in name]
    assert not [name for name in python_names if name in err[0]], err  # the flags' names, as the user typed them


def test_the_library_says_python_names_and_the_command_line_flags():
    """The library's message stays as it is; the command line translates it (helpers.__main__.in_flags)."""
    from helpers.__main__ import in_flags

    with pytest.raises(ValueError) as error:
        profile_step("mlp", 2, lora_targets=("fc",), device="simulated")
    assert str(error.value) == "lora_targets and lora_dropout apply to LoRA: give lora_rank too"
    assert in_flags(str(error.value)) == "--lora-targets and --lora-dropout apply to LoRA: give --lora-rank too"
    assert in_flags("x is a Hugging Face causal LM: give the sequence length with seq_len= (--seq-len); its "
                    "context") == "x is a Hugging Face causal LM: give the sequence length with --seq-len; its context"
    assert in_flags("resnet18 takes samples of input_shape (3, 32, 32) (--input-shape)") == (
        "resnet18 takes samples of --input-shape (3, 32, 32)")
    # quoted values and paths stay as typed; options the command line does not have keep their names
    assert in_flags("no file './lora_rank.py' (from --model ./lora_rank.py:build)") == (
        "no file './lora_rank.py' (from --model ./lora_rank.py:build)")
    assert in_flags("leave set_to_none=True; give inputs=") == "leave set_to_none=True; give inputs="
    assert in_flags("the model's output; step the optimizer") == "the model's output; step the optimizer"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised without a GPU")
def test_cuda_without_gpu_exits_with_one_line():
    run = subprocess.run([sys.executable, "-m", "helpers", "profile", "--device", "cuda"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "python -m helpers profile: error: device 'cuda' was asked for, but PyTorch sees no GPU here "
        "(torch.cuda.is_available() is False); use 'auto' or 'simulated'"]
    assert run.stdout == ""


def test_no_command_prints_the_usage(capsys):
    assert main([]) == 2
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m helpers") and "profile" in out and "check" in out


def test_a_step_no_gpu_can_hold_says_so(capsys):
    assert main(["profile", "--device", "simulated", "--image-size", "100000"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("python -m helpers profile: note: this step needs ")
    assert ("TiB (peak allocated of the whole step + 1,024.0 MiB assumed overhead), more than any GPU in helpers' "
            "list has (the largest, H100 80 GB") in err[0]
    assert main(["profile", "--device", "simulated", "--batch-size", "8", "--image-size", "64"]) == 0
    assert capsys.readouterr().err == ""


def test_the_answer_says_what_the_batch_is():
    from types import SimpleNamespace

    from helpers.__main__ import _inputs

    def said(shape, **options):
        return _inputs(SimpleNamespace(input_shape=shape, config=config.StepConfig(**options)))

    assert said((1024,), model="gpt2", batch_size=1) == "batch 1 of 1,024 tokens"  # the preset's context
    assert said((16,), model="gpt2", seq_len=16, batch_size=2) == "batch 2 of 16 tokens"
    assert said((3, 224, 224), model="resnet18") == "batch 128 of 3x224x224 images"
    assert said((64,), model="mlp", batch_size=4) == "batch 4 of samples of shape (64,)"
    assert said((1, 28, 28), model="resnet18", input_shape=(1, 28, 28)) == "batch 128 of samples of shape (1, 28, 28)"


def test_step_event_labels_are_not_cut(capsys):
    assert main(["profile", "--device", "simulated", "--batch-size", "2", "--image-size", "64", "--table"]) == 0
    assert "[parameters, buffers, optimizer states]" in capsys.readouterr().out


# lesson 04's reentrant trap, run on purpose: PyTorch's warning about it is expected here
@pytest.mark.filterwarnings("ignore:None of the inputs have requires_grad=True:UserWarning")
def test_cli_gives_lesson_04s_figures(capsys):
    """Lesson 04 profiles first steps: --first-step gives its figures, in the answer's first line."""
    for flags, options in ((["--amp", "--checkpoint", "4"], dict(amp=True, checkpoint=4)),
                           (["--amp", "--offload"], dict(amp=True, offload=True))):
        assert main(["profile", *flags, "--first-step", "--device", "simulated"]) == 0
        out = capsys.readouterr().out.strip().splitlines()
        peak = profile_step("resnet18", 128, device="simulated", **options).peak_allocated_bytes
        assert out[0] == f"peak allocated: {peak / 2**20:,.1f} MiB (simulated)"
        assert out[1].startswith("  of the first training step")
        assert "does it fit? no verdict on a first step" in "\n".join(out)
    assert main(["profile", "--amp", "--checkpoint", "4", "--reentrant", "--first-step", "--device",
                 "simulated"]) == 0
    assert "39 parameters got no gradient" in capsys.readouterr().err


def test_a_language_model_runs_batch_1_unless_told(capsys):
    """Token inputs (--seq-len, or a GPT-2 or Llama preset) default to batch 1, and the answer says why;
    images keep StepConfig's 128; a batch given is the batch run."""
    from helpers.__main__ import TOKEN_BATCH, _batch_size, _parser

    def options(*flags):
        args = _parser().parse_args(["profile", *flags])
        return {name: getattr(args, name) for _, name, _ in CLI_OPTIONS}

    assert TOKEN_BATCH == 1
    assert _batch_size(options("--model", "gpt2"))[0] == 1  # a preset at its context: token ids too
    assert _batch_size(options("--model", "llama3-8b"))[0] == 1
    assert _batch_size(options("--model", "meta-llama/Llama-3.1-8B", "--seq-len", "2048"))[0] == 1
    assert _batch_size(options("--model", "resnet18")) == (128, "")
    assert _batch_size(options("--model", "gpt2", "--batch-size", "8")) == (8, "")
    # the step test_gpt_presets_and_a_learners_own_model_from_the_command_line asks next (kept: traced once)
    assert main(["profile", "--model", "gpt2", "--seq-len", "32", "--optimizer", "adam", "--device", "simulated"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "gpt2, batch 1 of 32 tokens, Adam" in out[1]
    assert out[2] == ("  (batch 1: the default for token inputs, whose sample is a whole sequence; --batch-size to "
                      "change it)")
    assert main(["profile", "--model", "gpt2", "--seq-len", "32", "--optimizer", "adam", "--batch-size", "2",
                 "--first-step", "--device", "simulated", "--json"]) == 0  # a first step: the batch run is the subject
    assert json.loads(capsys.readouterr().out)["batch_size"] == 2


def test_gpt_presets_and_a_learners_own_model_from_the_command_line(capsys):
    gpt2 = ["profile", "--model", "gpt2", "--seq-len", "32", "--batch-size", "1", "--optimizer", "adam", "--device",
            "simulated"]  # one step, traced once: the JSON, then the text
    assert main([*gpt2, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"] == "gpt2" and data["input_shape"] == [32] and data["config"]["seq_len"] == 32
    assert data["batch_size"] == 1 and data["config"]["optimizer"] == "adam"
    assert main(gpt2) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("model states"))
    assert line.endswith(", 16.00 bytes per parameter (124,439,808 parameters)")
    own = ["profile", "--model", "helpers.models:digits_mlp", "--batch-size", "4", "--device", "simulated"]
    assert main(own) == 2  # digits_mlp takes 64 features, not images
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "digits_mlp cannot run on input (4, 3, 224, 224)" in err[0] and "--input-shape" in err[0]
    assert main([*own, "--input-shape", "64", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["input_shape"] == [64] and data["model"] == "digits_mlp"
    assert data["peak_allocated_bytes"] == profile_step("helpers.models:digits_mlp", 4, input_shape=(64,),
                                                        device="simulated", steady_state=True).peak_allocated_bytes
    for bad in ("3,x", "0,4"):
        with pytest.raises(SystemExit) as exit_info:
            main([*own, "--input-shape", bad])
        assert exit_info.value.code == 2
        assert "--input-shape" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        raise SystemExit(main(["profile", "--model", "no_such_package:build", "--device", "simulated"]))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot import 'no_such_package'" in err[0]


@pytest.mark.parametrize("optimizer, states", [("adam", 2), ("adamw", 2), ("sgd-momentum", 1), ("sgd", 0)])
def test_the_cli_reports_each_optimizers_states(capsys, optimizer, states):
    assert main(["profile", "--model", "mlp", "--batch-size", "8", "--optimizer", optimizer, "--steady-state",
                 "--device", "simulated", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["categories"]["optimizer_states"] == states * data["categories"]["parameters"]
    assert data["config"]["optimizer"] == optimizer


def test_reserved_replays_the_step_through_the_allocator_model(capsys):
    from helpers.allocator import replay

    assert main(["profile", "--device", "simulated", "--batch-size", "8", "--image-size", "64", "--reserved",
                 "--steady-state", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    profile = profile_step("resnet18", 8, image_size=64, device="simulated", steady_state=True)
    run = replay(profile.allocation_log)
    assert out["allocator"]["peak_reserved_bytes"] == run.peak_reserved >= out["peak_allocated_bytes"]
    assert out["allocator"]["settings"] == "defaults" and all(out["fits"]["cards"].values())
    assert out["fits"]["judged"] == ("peak reserved of the whole step (simulated allocator) + 512.0 MiB assumed "
                                     "CUDA context")
    assert main(["profile", "--device", "simulated", "--batch-size", "8", "--image-size", "64", "--reserved",
                 "--alloc-conf", "expandable_segments:True"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2].startswith("simulated caching allocator (expandable_segments:True): peak reserved")
    verdict = lines.index("does it fit? peak reserved of the whole step (simulated allocator) + 512.0 MiB assumed "
                          "CUDA context + the lines below:")
    assert set(_answers(lines[verdict + 1:verdict + 6]).values()) == {"fits"}


def test_the_cli_says_which_cards_a_steady_step_fits(capsys):
    from helpers.gpus import GPU_CARDS, judge

    args = ["profile", "--device", "simulated", "--model", "resnet18", "--batch-size", "800", "--steady-state"]
    assert main(args) == 0
    peak = profile_step("resnet18", 800, device="simulated", steady_state=True).peak_allocated_bytes
    fit = [card for card, capacity in GPU_CARDS.items() if judge(capacity, peak, card=card, cublas_handles=2, convolutions=True).fits]
    assert fit == ["RTX 4090 24 GB", "A100 40 GB", "A100 80 GB", "H100 80 GB"]  # about 16.7 GiB + 1 GiB: no V100
    out = lines = capsys.readouterr().out.splitlines()
    verdict = out.index("does it fit? peak allocated of the whole step + 1,024.0 MiB assumed overhead + the lines "
                        "below:")
    assert _answers(out[verdict + 1:verdict + 6]) == {card: "fits" if card in fit else "does not fit"
                                                       for card in GPU_CARDS}
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["fits"]
    assert out["cards"] == {card: card in fit for card in GPU_CARDS} and out["overhead_bytes"] == 2**30
    assert out["need_bytes"]["V100 16 GB"] == peak + 2**30 + 2 * 8_519_680  # two cuBLAS workspaces
    assert out["tight"] == {card: False for card in GPU_CARDS} and out["tight_fraction"] == 0.05
    # the steady state is the default; a first step is no verdict on training: its forward and backward run
    # without the optimizer's states
    assert main(args[:-1]) == 0 and capsys.readouterr().out.splitlines() == lines
    assert main([*args[:-1], "--first-step"]) == 0
    assert "does it fit? no verdict on a first step" in capsys.readouterr().out
    assert main([*args[:-1], "--first-step", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fits"] is None


def _answers(lines: list[str]) -> dict[str, str]:
    """Card -> its answer ("fits", "fits, tight", "does not fit"), from the verdict's lines."""
    import re

    return dict(re.split(r"\s{2,}", line.strip())[:2] for line in lines)


@pytest.mark.parametrize("args, message", [
    (["--alloc-conf", "expandable_segments:True"], "give --reserved too"),
    (["--reserved", "--alloc-conf", "garbage_collection_threshold:0.6"], "not modelled"),
    (["--reserved", "--alloc-conf", "max_split_size_mb:8"], ">= 20"),
])
def test_bad_allocator_settings_exit_with_one_line(capsys, args, message):
    assert main(["profile", "--device", "simulated", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


REPO = Path(__file__).resolve().parents[1]
PROG = "python -m helpers profile"


def _refused_here(capsys, *args: str) -> str:
    """The one line of a refusal (exit status 2, nothing on stdout), of ``main()`` run in this process (a message's
    wording needs no fresh process)."""
    with pytest.raises(SystemExit) as exit_info:
        raise SystemExit(main(["profile", "--device", "simulated", *args]))
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2 and out == "", (exit_info.value.code, out)
    err = err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"{PROG}: error: "), err
    return err[0].removeprefix(f"{PROG}: error: ")


def test_llama3_8b_is_a_preset_from_the_command_line(capsys):
    with pytest.raises(SystemExit):
        main(["profile", "--help"])
    assert "llama3-8b" in " ".join(capsys.readouterr().out.split())
    # a first step: the preset's name, inputs and parameters are the subject (its trace about half the steady one's)
    assert main(["profile", "--device", "simulated", "--model", "llama3-8b", "--seq-len", "16", "--batch-size", "1",
                 "--optimizer", "adamw", "--first-step", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"] == "llama3-8b" and data["input_shape"] == [16] and data["config"]["seq_len"] == 16
    assert data["parameter_count"] == 8_030_261_248 and data["config"]["steady_state"] is False


def test_an_unknown_model_names_the_presets_both_forms_and_the_shipped_configs(capsys):
    message = _refused_here(capsys, "--model", "resnet1000")
    assert message.startswith("unknown model 'resnet1000'; use a preset (mlp, gpt2, gpt2-medium, gpt2-large, "
                              "gpt2-xl, llama3-8b), any torchvision classification model (")
    assert "or your own as package.module:function or path/to/file.py:function" in message
    assert message.endswith("; or a Hugging Face config shipped with the lessons (give --seq-len): "
                            + ", ".join(hf_config.SHIPPED))


@pytest.mark.parametrize("args, message", [
    (["--model", "gpt2"], "--image-size applies to image inputs; gpt2 takes token ids"),
    (["--model", "llama3-8b", "--seq-len", "16"],
     "--image-size applies to image inputs; llama3-8b takes token ids (--seq-len)"),
    (["--model", "mlp"], "--image-size applies to image inputs; mlp takes 64 features"),
    (["--input-shape", "3,32,32"],
     "--image-size applies to image inputs; resnet18 takes samples of --input-shape (3, 32, 32)"),
])
def test_image_size_is_refused_where_the_inputs_are_not_images(capsys, args, message):
    assert _refused_here(capsys, *args, "--image-size", "64") == message


def test_a_model_of_repeated_blocks_says_how_its_step_was_simulated(capsys):
    """GPT-2 1.5B's 48 blocks: written from its steps with 6 and 7 blocks, or, with --full-trace, traced."""
    args = ["profile", "--model", "gpt2-xl", "--seq-len", "16", "--device", "simulated"]
    assert main(args) == 0
    out = capsys.readouterr().out.splitlines()
    reached = next(i for i, line in enumerate(out) if line.startswith("peak reached by event "))
    assert out[reached + 1:reached + 3] == ["  simulated: written exactly from its steps with 6 and 7 blocks "
                                            "(helpers.depth)", "what fills it at the peak:"]
    # the step the next test asks first (kept: traced once)
    assert main(["profile", "--model", "resnet18", "--image-size", "64", "--batch-size", "8", "--device",
                 "simulated"]) == 0
    assert not any(line.startswith("  simulated:") for line in capsys.readouterr().out.splitlines())


def test_gpu_asks_about_one_card_and_an_unknown_card_lists_the_names(capsys):
    from helpers.gpus import GPU_CARDS

    args = ["profile", "--model", "resnet18", "--image-size", "64", "--batch-size", "8", "--device", "simulated"]
    assert main([*args, "--gpu", "h100 80 gb"]) == 0  # its name, in any case
    out = capsys.readouterr().out.splitlines()
    assert out[2].startswith("does it fit? ") and out[3].startswith("  H100 80 GB  fits")
    assert not any(card in line for line in out[4:] for card in GPU_CARDS if card != "H100 80 GB")
    assert main([*args, "--gpu", "V100 16 GB", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fits"]["cards"] == {"V100 16 GB": True}
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--gpu", "H200"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"python -m helpers profile: error: argument --gpu: unknown card 'H200'; the cards: "
                   f"{', '.join(GPU_CARDS)}"]


# The two tests below patch (monkeypatch), which makes each forget the kept profiles (tests/conftest.py): they come after
# the tests above, which share steps (resnet18 at 64 x 64 and batch 8, GPT-2 at 32 tokens) traced once.
def test_a_learners_model_that_fails_to_build_exits_with_one_line(capsys, tmp_path, monkeypatch):
    (tmp_path / "learner_models.py").write_text("def broken():\n    raise RuntimeError('my model is broken')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["profile", "--model", "learner_models:broken", "--device", "simulated"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["python -m helpers profile: error: building broken failed: RuntimeError: my model is broken"]


def test_a_learners_model_from_a_file_path(tmp_path, capsys, monkeypatch):
    """From the learner's folder (the working directory), in this process: the path is read relative to the working
    directory, which ``monkeypatch.chdir`` sets as a fresh process's ``cwd=`` would (a fresh process, 4.4 s of CPU
    for its imports, is test_cuda_without_gpu_exits_with_one_line's subject: the exit status and all of stderr)."""
    (tmp_path / "mymodel.py").write_text("from torch import nn\n\n\ndef build():\n"
                                         "    return nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))\n")
    monkeypatch.chdir(tmp_path)
    assert main(["profile", "--device", "simulated", "--model", "./mymodel.py:build", "--input-shape", "64",
                 "--batch-size", "4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"] == "build" and data["input_shape"] == [64]
    assert data["peak_allocated_bytes"] == profile_step(f"{tmp_path / 'mymodel.py'}:build", 4, input_shape=(64,),
                                                        device="simulated", steady_state=True).peak_allocated_bytes
    assert _refused_here(capsys, "--model", "./mymodel.py") == (
        "name the function in ./mymodel.py that returns the model: ./mymodel.py:function")
    assert _refused_here(capsys, "--model", "./other.py:build") == "no file './other.py' (from --model ./other.py:build)"
    assert _refused_here(capsys, "--model", "mymodel.py:nothing") == (
        "'mymodel.py' has no function 'nothing' (from --model mymodel.py:nothing)")


@pytest.mark.parametrize("text, sizes", [("8", 8), ("1,2,4,8", (1, 2, 4, 8)), ("1-4,8", (1, 2, 3, 4, 8)),
                                         ("8,2,2", (2, 8)), ("3-3", 3)])
def test_several_batch_sizes_are_read_as_a_list_or_a_range(text, sizes):
    """``--batch-size``: one integer, several separated by commas, a range with both ends (sorted, each once)."""
    from helpers.cli_batches import parse

    assert parse(text) == sizes


def test_several_batch_sizes_print_one_exact_row_each(capsys, symbolic_logs):
    """``--batch-size 200,300,500,900``: one row per batch size, its peak the peak a concrete trace at that batch size
    gives (the first concrete, the later ones evaluated from one symbolic trace, checked against the first), in text
    and JSON; ``--gpu`` judges that card only.  The MLP preset: the rows' logic, not a model's figures, is the subject
    (its peaks differ in the printed MiB)."""
    from helpers.gpus import GPU_CARDS
    from helpers.profile import obtain_concrete
    from helpers.units import fmt_mib

    sizes = (200, 300, 500, 900)
    args = ["profile", "--model", "mlp", "--device", "simulated", "--batch-size", ",".join(map(str, sizes))]
    assert main(args) == 0
    out = capsys.readouterr().out.splitlines()
    concrete = {b: obtain_concrete(config.StepConfig(model="mlp", batch_size=b, steady_state=True,
                                                     device="simulated")) for b in sizes}
    assert len({fmt_mib(p.peak_allocated_bytes) for p in concrete.values()}) == len(sizes)  # four rows told apart
    assert out[0] == "peak allocated by batch size (simulated): mlp"
    for line, (b, p) in zip(out[1:5], concrete.items()):
        assert line == f"  batch {b}  {fmt_mib(p.peak_allocated_bytes):>14}  fits: {', '.join(GPU_CARDS)}"
    assert out[5].startswith("  3 of 4 rows evaluated from one symbolic trace")
    assert main([*args, "--json", "--gpu", "V100 16 GB"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["batch_sizes"] == list(sizes)
    for row, (b, p) in zip(data["rows"], concrete.items()):
        assert row["batch_size"] == b and row["peak_allocated_bytes"] == p.peak_allocated_bytes
        assert row["categories"] == p.categories and row["fits"]["cards"] == {"V100 16 GB": True}
