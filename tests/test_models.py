"""helpers.models: torchvision by name, small networks, GPT-2 presets, a learner's own model."""

import pytest
import torch
from torch import nn

from helpers import build_model, sequential_form
from helpers.config import PRESET_INPUTS
from helpers.models import (LANGUAGE_PRESETS, PRESETS, classification_models, dropout_mlp, meta_copy, model_names,
                            output_logits, resolve_model)
from helpers.models.gpt import GPT, GPT2_PRESETS, GPTConfig
from helpers.models.llama import LLAMA_PRESETS, Llama, LlamaConfig


@pytest.mark.parametrize("name", ["resnet18", "alexnet", "vgg11", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0"])
def test_sequential_form_computes_the_same_function(name):
    torch.manual_seed(0)
    model = build_model(name).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert torch.allclose(sequential_form(model)(x), model(x), atol=1e-5)


def test_every_torchvision_classifier_builds_on_meta():
    with torch.device("meta"):
        for name in classification_models():
            model = build_model(name)
            assert {p.device.type for p in model.parameters()} == {"meta"}, name


def test_unknown_names_are_refused_with_suggestions():
    with pytest.raises(ValueError, match="unknown model 'resnet-18'.*resnet"):
        build_model("resnet-18")
    with pytest.raises(ValueError) as err:
        resolve_model("resnet-18")
    assert str(err.value) == (
        "unknown model 'resnet-18'; use a preset (mlp, gpt2, gpt2-medium, gpt2-large, gpt2-xl, llama3-8b), any "
        "torchvision classification model (resnet18, vit_b_16, ...; close to yours: resnet101, resnet152, resnet18, "
        "resnet34), or your own as package.module:function or path/to/file.py:function")
    with pytest.raises(ValueError, match="name the function in mine.py that returns the model: mine.py:function"):
        resolve_model("mine.py")


def test_the_presets_are_declared_once_for_the_options():
    """helpers.config says what each preset takes (for image_size and the --model help); the specs agree."""
    assert list(PRESETS) == list(PRESET_INPUTS)
    for name, takes in PRESET_INPUTS.items():
        spec = resolve_model(name)
        assert (spec.vocab_size is not None) == (takes == "token ids") == (name in LANGUAGE_PRESETS), name
        assert spec.input_shape == ((64,) if takes == "64 features" else None), name


def test_llama3_8b_is_a_preset_at_its_context():
    spec = resolve_model("llama3-8b")
    config = LLAMA_PRESETS["llama3-8b"]
    assert (spec.vocab_size, spec.seq_len) == (128256, 131072) == (config.vocab_size, config.n_positions)
    with torch.device("meta"):
        model = spec.build()
    assert isinstance(model, Llama) and sum(p.numel() for p in model.parameters()) == 8_030_261_248
    for bad in (0, True, 2.5):
        with pytest.raises(ValueError, match=rf"^n_layer must be an integer >= 1, got {bad!r}$"):
            LlamaConfig(n_layer=bad)


def test_a_learners_model_from_a_file(tmp_path):
    (tmp_path / "mymodel.py").write_text("from torch import nn\n\n"
                                         "def build():\n    return nn.Sequential(nn.Flatten(), nn.Linear(12, 3))\n")
    (tmp_path / "broken.py").write_text("import no_such_package\n")
    spec = resolve_model(f"{tmp_path / 'mymodel.py'}:build")
    assert spec.name == "build" and sum(p.numel() for p in spec.build().parameters()) == 39
    with pytest.raises(ValueError, match=r"^no file '.*missing.py' \(from --model .*missing.py:build\)$"):
        resolve_model(f"{tmp_path / 'missing.py'}:build")
    with pytest.raises(ValueError, match=r"cannot import '.*broken.py' .*ModuleNotFoundError: No module named "
                                         r"'no_such_package'$"):
        resolve_model(f"{tmp_path / 'broken.py'}:build")
    with pytest.raises(ValueError, match=r"mymodel.py' has no function 'nothing'"):
        resolve_model(f"{tmp_path / 'mymodel.py'}:nothing")


@pytest.mark.parametrize("name, parameters", [("gpt2", 124_439_808), ("gpt2-medium", 354_823_168),
                                              ("gpt2-large", 774_030_080), ("gpt2-xl", 1_557_611_200)])
def test_gpt2_presets_have_gpt2s_parameter_counts(name, parameters):
    with torch.device("meta"):
        model = GPT(name)
    assert sum(p.numel() for p in model.parameters()) == parameters == GPT2_PRESETS[name].parameter_count()
    assert model.head.embeddings[0].token.weight is model.embeddings.token.weight  # the tied head


def test_a_small_gpt_runs_and_its_sequential_form_is_the_same_function():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=50, n_positions=16, d_model=32, n_layer=2, n_head=4)).eval()
    ids = torch.randint(0, 50, (3, 16))
    with torch.no_grad():
        logits = model(ids)
        assert logits.shape == (3, 16, 50)
        assert torch.equal(sequential_form(model)(ids), logits)
    with pytest.raises(ValueError, match="longer than the model's context"):
        model(torch.randint(0, 50, (1, 17)))
    with pytest.raises(ValueError, match="multiple of n_head"):
        GPTConfig(d_model=30, n_head=4)
    with pytest.raises(ValueError, match="unknown GPT preset"):
        GPT("gpt3")


def test_a_learners_module_is_copied_to_meta_without_touching_it():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    copy = meta_copy(model)
    assert {p.device.type for p in copy.parameters()} == {"meta"}
    assert {p.device.type for p in model.parameters()} == {"cpu"}
    tied = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 10, bias=False))
    tied[1].weight = tied[0].weight
    assert len(list(meta_copy(tied).parameters())) == 1  # still tied


def test_resolve_model_knows_every_kind():
    assert resolve_model("resnet18").num_classes == 1000 and resolve_model("resnet18", 10).num_classes == 10
    mlp = resolve_model("mlp")
    assert mlp.input_shape == (64,) and mlp.num_classes == 10
    gpt = resolve_model("gpt2")
    assert gpt.vocab_size == 50257 and gpt.seq_len == 1024
    module = nn.Linear(3, 2)
    assert resolve_model(module).name == "Linear" and resolve_model(module, name="mine").name == "mine"
    assert resolve_model(lambda: module).name == "<lambda>"
    assert resolve_model("helpers.models:digits_mlp").name == "digits_mlp"
    assert set(PRESETS) <= set(model_names()) and "resnet18" in model_names()
    with pytest.raises(ValueError, match="cannot import 'no_such_package'"):
        resolve_model("no_such_package:build")
    with pytest.raises(ValueError, match="has no function 'nothing'"):
        resolve_model("helpers.models:nothing")
    with pytest.raises(ValueError, match="model must be"):
        resolve_model(3)


def test_output_logits_finds_the_tensor():
    x = torch.ones(2, 3)
    assert output_logits(x) is x and output_logits((x, None)) is x

    class Output:
        logits = x

    assert output_logits(Output()) is x
    with pytest.raises(ValueError, match="not a tensor of logits"):
        output_logits({"a": x})


def test_lesson_02s_dropout_mlp():
    model = dropout_mlp()
    assert sum(p.numel() for p in model.parameters()) == 784 * 1024 + 1024 + 3 * (1024 * 1024 + 1024) + 1024 * 10 + 10
    assert [type(m).__name__ for m in model[1:4]] == ["Linear", "ReLU", "Dropout"]
    assert type(dropout_mlp(nn.GELU)[2]).__name__ == "GELU"
    assert tuple(model(torch.zeros(2, 1, 28, 28)).shape) == (2, 10)
