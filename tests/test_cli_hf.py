"""``python -m helpers profile`` with a Hugging Face model and LoRA, and its bad input.

Every run uses the small shipped SmolLM2-135M at a few tokens (about a second
each).  Bad input ends with exit status 2 and one line naming the problem, on
the command line and as one ``ValueError`` line from ``profile_step``.
"""

import json
import subprocess
import sys

import pytest
import torch

from helpers import config, profile_step
from helpers.__main__ import in_flags, library_defaults, main
from helpers.flags import CLI_OPTIONS
from helpers import hf_config
from helpers.models import hf

SMOL = "HuggingFaceTB/SmolLM2-135M"
SHORT = ["--batch-size", "1", "--seq-len", "8", "--device", "simulated"]
ERROR = "python -m helpers profile: error: "


def _run(capsys, *argv):
    code = main(["profile", *argv])
    out, err = capsys.readouterr()
    return code, out, err


#: A Llama of two layers, hidden size 64, 2 KV heads of 16, float16: the smallest model of the code path a shipped
#: config takes (a config.json read, built by transformers, trained by the step), for options that must reach the step.
TINY = dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=256, torch_dtype="float16")


def _tiny(tmp_path) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    return str(path)


def test_lora_flags_reach_the_step(capsys, tmp_path):
    tiny = _tiny(tmp_path)
    code, out, err = _run(capsys, "--model", tiny, *SHORT, "--amp", "--amp-dtype", "bfloat16", "--lora-rank", "4",
                          "--lora-targets", "q_proj,v_proj", "--lora-dropout", "0.05", "--optimizer", "adamw",
                          "--json")
    assert code == 0, err
    profile = json.loads(out)
    assert profile["config"]["lora_rank"] == 4
    assert profile["config"]["lora_targets"] == ["q_proj", "v_proj"]
    assert profile["config"]["lora_dropout"] == 0.05
    # the tiny Llama: 2 layers, hidden 64, 2 KV heads of 16: q_proj 64 -> 64, v_proj 64 -> 32
    adapters = 2 * 4 * ((64 + 64) + (64 + 32))
    full = profile_step(tiny, batch_size=1, seq_len=8, device="simulated")
    assert profile["parameter_count"] == full.parameter_count + adapters
    assert profile["categories"]["gradients"] < full.categories["gradients"] / 20  # the adapters' only


def test_a_config_path_works_as_a_shipped_name(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text((hf_config.CONFIG_DIR / hf_config.SHIPPED[SMOL].file).read_text())
    peaks = []
    for model in (SMOL, str(path), str(tmp_path)):
        code, out, err = _run(capsys, "--model", model, *SHORT, "--json")
        assert code == 0, err
        peaks.append(json.loads(out)["peak_allocated_bytes"])
    assert len(set(peaks)) == 1


# Next to the test above, before any test that patches (monkeypatch: each forgets the kept profiles, tests/conftest.py):
# SmolLM2's step at 8 tokens, written from its steps with 6 and 7 layers, is traced once for both.
def test_a_hugging_face_model_takes_the_pinned_libraries_defaults(capsys, tmp_path):
    """Unless told: parameters in the config's dtype (from_pretrained's dtype="auto"), fused AdamW (the Trainer's
    adamw_torch_fused), said in the answer's first lines; a flag given wins; a float16 config trains in float16."""
    code, out, err = _run(capsys, "--model", SMOL, *SHORT, "--json")  # the step the test above traced (kept)
    assert code == 0 and err == ""
    said = json.loads(out)["config"]
    assert (said["optimizer"], said["fused"], said["param_dtype"]) == ("adamw", True, "bfloat16")
    assert hf_config.load_config(SMOL).dtype == torch.bfloat16  # the config's own dtype
    expected = profile_step(SMOL, 1, seq_len=8, optimizer="adamw", fused=True, param_dtype="bfloat16",
                            steady_state=True, device="simulated")
    assert json.loads(out)["peak_allocated_bytes"] == expected.peak_allocated_bytes
    code, out, _ = _run(capsys, "--model", SMOL, *SHORT)
    lines = out.splitlines()
    assert lines[2] == ('  defaults of the pinned libraries: parameters in bfloat16: the config\'s dtype, as '
                        'from_pretrained\'s dtype="auto" loads them; fused AdamW: the Trainer\'s default optimizer '
                        '(adamw_torch_fused)')
    assert lines[3].startswith("does it fit? ")  # the verdict right after the peak and the step
    tiny = _tiny(tmp_path)  # a float16 config: the flags given win over its dtype and the Trainer's optimizer
    code, out, _ = _run(capsys, "--model", tiny, *SHORT, "--optimizer", "sgd", "--param-dtype", "float32", "--json")
    said = json.loads(out)["config"]
    assert (said["optimizer"], said["fused"], said["param_dtype"]) == ("sgd", False, "float32")
    code, out, _ = _run(capsys, "--model", tiny, *SHORT)
    assert code == 0
    assert ("parameters in float16: the config's dtype, as from_pretrained's dtype=\"auto\" loads them; "
            "fused AdamW") in out


def test_the_example_of_the_issue_parses():
    args = ["profile", "--model", "meta-llama/Llama-3.1-8B", "--seq-len", "2048", "--batch-size", "1", "--amp",
            "--amp-dtype", "bfloat16", "--lora-rank", "16", "--lora-targets", "q_proj,v_proj", "--lora-dropout",
            "0.05", "--optimizer", "adamw"]
    from helpers.__main__ import _parser

    parsed = _parser().parse_args(args)
    assert (parsed.lora_rank, parsed.lora_targets, parsed.lora_dropout) == (16, ("q_proj", "v_proj"), 0.05)


def _config_file(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


NO_SEQ = ["--batch-size", "1", "--device", "simulated"]

#: case: (argv from a temporary folder, what the one line must say)
BAD = {
    "unknown architecture": (lambda d: ["--model", _config_file(d, "a.json", '{"model_type": "nosuchmodel"}'),
                                        *SHORT], "does not know the architecture 'nosuchmodel'"),
    "remote code": (lambda d: ["--model", _config_file(d, "b.json", json.dumps(
        {"model_type": "llama", "auto_map": {"AutoModelForCausalLM": "x.Y"}})), *SHORT], "needs trust_remote_code"),
    "target matching nothing": (lambda d: ["--model", SMOL, "--lora-rank", "4", "--lora-targets", "q_proj,qkv",
                                           *SHORT],
                                "LoRA target 'qkv' matches no linear layer of HuggingFaceTB/SmolLM2-135M; its "
                                "linear layers are q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, "
                                "lm_head"),
    "rank 0 with targets": (lambda d: ["--model", SMOL, "--lora-rank", "0", "--lora-targets", "q_proj", *SHORT],
                            "lora_targets and lora_dropout apply to LoRA: give lora_rank too"),
    "negative dropout": (lambda d: ["--model", SMOL, "--lora-rank", "4", "--lora-dropout", "-0.1", *SHORT],
                         "lora_dropout must be a probability from 0 to below 1, got -0.1"),
    "missing config": (lambda d: ["--model", str(d / "missing.json"), *SHORT], "no config file"),
    "missing folder": (lambda d: ["--model", str(d / "nowhere") + "/", *SHORT], "no folder"),
    "malformed config": (lambda d: ["--model", _config_file(d, "c.json", '{"model_type": '), *SHORT],
                         "as a config.json: Expecting value"),
    "LoRA on a torchvision model without targets": (lambda d: ["--model", "resnet18", "--lora-rank", "4", *NO_SEQ],
                                                    "peft has no default LoRA targets for ResNet"),
    "Hub name offline": (lambda d: ["--model", "someorg/somemodel", *SHORT],
                         "cannot fetch the config of 'someorg/somemodel' from the Hugging Face Hub"),
    "no sequence length": (lambda d: ["--model", SMOL, *NO_SEQ],
                           "is a Hugging Face causal LM: give the sequence length with seq_len= (--seq-len)"),
}


def _argv(case, tmp_path):
    return BAD[case][0](tmp_path)


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_line_and_exit_status_2(case, capsys, tmp_path, monkeypatch):
    """The library's message, in the flags' names (helpers.__main__.in_flags)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the Hub case: no network here, and none tried in tests
    code, out, err = _run(capsys, *_argv(case, tmp_path))
    assert code == 2
    assert out == ""
    assert err.startswith(ERROR) and err.count("\n") == 1, err
    assert in_flags(BAD[case][1]) in err
    assert "Traceback" not in err
    assert not any(name in err for name in ("lora_rank", "lora_targets", "lora_dropout", "seq_len")), err


@pytest.mark.parametrize("case", [c for c in BAD if c != "Hub name offline"])
def test_bad_input_is_one_valueerror_line_from_profile_step(case, tmp_path):
    argv = _argv(case, tmp_path)
    options = vars(_parse(argv))
    options = {name: options[name] for _, name, _ in CLI_OPTIONS}
    library_defaults(options)  # what the command line does before the step
    try:
        profile_step(**options)
    except ValueError as e:
        assert BAD[case][1] in str(e) and "\n" not in str(e)
    else:
        pytest.fail(f"{case}: no ValueError")


def _parse(argv):
    from helpers.__main__ import _parser

    return _parser().parse_args(["profile", *argv])


def test_a_hub_name_offline_fails_at_once_without_network_noise(tmp_path):
    """In a fresh process (no HF_HUB_OFFLINE): the host does not resolve here, so no retries are tried."""
    result = subprocess.run([sys.executable, "-m", "helpers", "profile", "--model", "someorg/somemodel", *SHORT],
                            capture_output=True, text=True, timeout=120, env={**_env(), "HF_HUB_OFFLINE": "0"})
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Retrying" not in result.stderr, result.stderr
    assert "cannot fetch the config of 'someorg/somemodel'" in result.stderr
    assert all(name in result.stderr for name in hf_config.shipped_configs())


def _env():
    import os

    return {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}


def test_lora_on_a_torchvision_model_with_named_targets_trains_only_the_adapters():
    """peft wraps any nn.Module when the targets are named: ResNet18's fc gains rank x (512 + 1000) parameters."""
    from helpers import round_up

    step = profile_step("resnet18", batch_size=2, image_size=32, lora_rank=4, lora_targets=("fc",),
                        device="simulated", optimizer="sgd")
    gradients = step.model_state_bytes - step.categories["parameters"]  # plain SGD: no states
    assert gradients == round_up(4 * 512 * 4) + round_up(1000 * 4 * 4)


def test_a_lora_run_prints_nothing_on_stderr(tmp_path):
    """transformers and peft import torchao, whose enums make torch log two warnings: silenced.  A fresh process, with
    the tiny Llama's config.json: the imports are the subject, not the model's size."""
    result = subprocess.run([sys.executable, "-m", "helpers", "profile", "--model", _tiny(tmp_path), *SHORT,
                             "--lora-rank", "2"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0
    assert result.stderr == ""
    assert result.stdout.splitlines()[0].startswith("peak allocated: ")


def test_lesson_09s_example_is_lesson_09s_step():
    """--help's lesson 09 example, with the libraries' defaults, is lesson 09's "LoRA r16, checkpointing" step
    (bfloat16 weights, checkpointing, AdamW; 18.0 GiB there, fits 24 GB), asked about one card."""
    import shlex

    from helpers.__main__ import EXAMPLES, _batch_size, _parser, library_defaults

    command = next(line for line in EXAMPLES.replace("\\\n", "").splitlines() if "Llama-3.1-8B" in line)
    args = _parser().parse_args(shlex.split(command)[3:])
    options = {name: getattr(args, name) for _, name, _ in CLI_OPTIONS}
    options["batch_size"], _ = _batch_size(options)
    library_defaults(options)
    lesson_09 = dict(seq_len=2048, amp=True, amp_dtype="bfloat16", optimizer="adamw", steady_state=True,
                     device="auto", lora_rank=16, param_dtype="bfloat16", checkpoint=1)  # its STEP and section 4
    assert config.StepConfig(**options) == config.StepConfig("meta-llama/Llama-3.1-8B", 1, **lesson_09)
    assert args.gpu == "RTX 4090 24 GB"
