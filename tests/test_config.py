"""helpers.config: every option of a step, checked in one place."""

import dataclasses

import pytest

import torch

from helpers.config import IMAGE_SIZE, StepConfig, check_int, is_hf_config
from helpers.flags import CLI_OPTIONS


@pytest.mark.parametrize("options, message", [
    (dict(batch_size=0), "batch_size must be an integer >= 1"),
    (dict(batch_size=2.5), "batch_size must be an integer"),
    (dict(batch_size=True), "batch_size must be an integer"),
    (dict(image_size=0), "image_size must be an integer >= 1"),
    (dict(checkpoint=-1), "checkpoint must be an integer >= 0"),
    (dict(optimizer="lion"),
     "unknown optimizer 'lion'; use one of sgd, sgd-momentum, adam, adamw, adamw8bit, bnb-adamw8bit, paged-adamw, "
     "paged-adamw8bit"),
    (dict(device="tpu"), "unknown device 'tpu'"),
    (dict(amp_dtype="float8"), "unknown amp_dtype 'float8'"),
    (dict(attention="ring"), "unknown attention 'ring'"),
    (dict(amp="yes"), "amp must be True or False"),
    (dict(reentrant=True), "reentrant applies to checkpointing"),
    (dict(input_shape=(3, 0, 4)), "each input_shape entry must be an integer >= 1"),
    (dict(input_shape=(64,), seq_len=8), "not both"),
    (dict(inputs=lambda b, d: None, seq_len=8), "not both"),
    (dict(inputs=3), "inputs must be a function"),
    (dict(loss="hinge"), "unknown loss 'hinge'"),
    (dict(vocab_size=100), "vocab_size applies to token inputs"),
    (dict(num_classes=0), "num_classes must be an integer >= 1"),
    (dict(capacity=0), "capacity must be an integer >= 1"),
    (dict(model=3), "model must be a model name"),
    (dict(model=""), "model must be a model name"),
    (dict(model="gpt2", image_size=64), r"^image_size \(--image-size\) applies to image inputs; gpt2 takes token ids$"),
    (dict(model="llama3-8b", image_size=64), "llama3-8b takes token ids"),
    (dict(model="mlp", image_size=32), "mlp takes 64 features"),
    (dict(seq_len=8, image_size=64), "resnet18 takes token ids"),
    (dict(input_shape=(3, 32, 32), image_size=64), "resnet18 takes samples of input_shape"),
    (dict(inputs=lambda b, d: None, image_size=64), "image_size .* applies to image inputs"),
])
def test_each_bad_option_is_named(options, message):
    with pytest.raises(ValueError, match=message):
        StepConfig(**options)


def test_a_config_is_frozen_hashable_and_echoed():
    config = StepConfig(model="resnet18", batch_size=8, input_shape=[3, 64, 64])
    assert config.input_shape == (3, 64, 64) and config.sample_shape == (3, 64, 64)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.batch_size = 9
    assert config.curve_key() == config.replace(batch_size=77).curve_key()
    assert len({config, config.replace(batch_size=8)}) == 1
    echo = config.to_dict()
    assert echo["model"] == "resnet18" and echo["input_shape"] == [3, 64, 64] and echo["loss"] == "auto"

    def builder():
        return None

    assert StepConfig(model=builder, name="mine").to_dict()["model"] == "mine"
    assert StepConfig(model=builder).label == "builder"


def test_tasks_follow_the_inputs():
    from helpers.models import resolve_model, resolve_task

    def task(**options):
        config = StepConfig(**options)
        return resolve_task(config, resolve_model(config.model, config.num_classes))

    images = task()
    assert (images.inputs, images.sample_shape, images.loss, images.num_classes) == (
        "features", (3, 224, 224), "classification", 1000) and not StepConfig().tokens
    tokens = task(model="gpt2", seq_len=16)
    assert (tokens.inputs, tokens.sample_shape, tokens.vocab_size, tokens.loss) == ("tokens", (16,), 50257, "next_token")
    assert task(model="gpt2").sample_shape == (1024,)  # a preset's context is its default length
    assert task(seq_len=16, vocab_size=10).loss == "next_token"
    assert task(seq_len=16, vocab_size=10, loss="classification").loss == "classification"
    assert task(model="mlp", param_dtype="bfloat16").dtype == torch.bfloat16  # float samples as the parameters
    with pytest.raises(ValueError, match="token inputs need a vocabulary"):
        task(seq_len=16)


def test_one_check_says_what_is_a_hugging_face_config():
    assert is_hf_config({"model_type": "llama"}) and is_hf_config("HuggingFaceTB/SmolLM2-135M")
    assert is_hf_config("org/model") and is_hf_config("configs/") and is_hf_config("my_config.json")
    assert not is_hf_config("resnet18") and not is_hf_config("models/net.py") and not is_hf_config("pkg.mod:build")
    assert not is_hf_config({"hidden_size": 8}) and not is_hf_config(lambda: None)

    class Config:  # what transformers' PretrainedConfig looks like, without transformers
        model_type = "llama"

        def to_dict(self):
            return {}

    assert is_hf_config(Config()) and not is_hf_config(Config)  # an instance, not the class (callable)
    assert StepConfig(model=Config()).label == "llama"


def test_every_cli_flag_is_a_field():
    fields = {f.name for f in dataclasses.fields(StepConfig)}
    assert {name for _, name, _ in CLI_OPTIONS} <= fields
    assert all(flag == "--" + name.replace("_", "-") for flag, name, _ in CLI_OPTIONS)


def test_image_size_is_for_image_inputs_only():
    assert StepConfig(model="gpt2").image_size == IMAGE_SIZE == 224  # the default is no choice: accepted
    assert StepConfig(model="resnet18", image_size=64).sample_shape == (3, 64, 64)
    assert StepConfig(model=lambda: None, image_size=64).image_size == 64  # unknown until built: allowed


def test_check_int_is_the_one_integer_check():
    assert check_int("n", 3, 1) == 3 and check_int("n", 3, 1, 3) == 3
    for value, highest, message in ((0, None, "n must be an integer >= 1, got 0"),
                                    (True, None, "n must be an integer >= 1, got True"),
                                    (2.0, None, "n must be an integer >= 1, got 2.0"),
                                    (5, 4, "n must be an integer from 1 to 4, got 5")):
        with pytest.raises(ValueError) as err:
            check_int("n", value, 1, highest)
        assert str(err.value) == message
    with pytest.raises(ValueError, match="^n must be a whole number above 20, got 20$"):
        check_int("n", 20, 21, what="a whole number above 20")


def test_frozen_is_a_served_model_whose_weights_quantize_without_lora():
    """frozen=True: no parameter trains, so quantization= needs no LoRA; with LoRA it is refused, and profile_step,
    which traces a training step, refuses it in one line."""
    from helpers import profile_step

    assert StepConfig(model="HuggingFaceTB/SmolLM2-135M", seq_len=8, frozen=True, quantization="nf4").frozen
    with pytest.raises(ValueError, match="give lora_rank too"):
        StepConfig(model="HuggingFaceTB/SmolLM2-135M", seq_len=8, quantization="nf4")
    with pytest.raises(ValueError, match="frozen= keeps every parameter frozen"):
        StepConfig(model="HuggingFaceTB/SmolLM2-135M", seq_len=8, frozen=True, lora_rank=4)
    with pytest.raises(ValueError, match="profile_step traces a training step"):
        profile_step("HuggingFaceTB/SmolLM2-135M", 1, seq_len=8, frozen=True, device="simulated")
