"""vLLM's tensor and pipeline parallelism per rank (helpers.vllm_rules, vllm_startup's tensor_parallel_size and
pipeline_parallel_size), and the published start-ups over several GPUs beside the engine (issue 53: the weights per
rank within 2%, the KV cache's tokens within 5%)."""

import types

import pytest

from helpers.hf_config import load_config
from helpers.serving import kv_bytes_per_token, vllm_startup
from helpers.teaching.vllm_logs import PARALLEL_LOGS, engine_beside_logs
from helpers.units import GiB
from helpers.vllm_rules import Split, check_split, padded_vocab, rank_config, stage_layers

LLAMA = "meta-llama/Llama-3.1-8B"


def test_layers_per_stage_as_get_pp_indices_assigns_them():
    assert stage_layers(32, 2) == [(0, 16), (16, 32)]
    assert stage_layers(32, 4) == [(0, 8), (8, 16), (16, 24), (24, 32)]
    # the remainder goes to the stages before the last, from the last but one backwards
    assert [end - start for start, end in stage_layers(30, 4)] == [7, 8, 8, 7]
    assert [end - start for start, end in stage_layers(80, 3)] == [27, 27, 26]
    assert [end - start for start, end in stage_layers(5, 4)] == [1, 1, 2, 1]


def test_the_vocabulary_is_padded_to_64_then_cut():
    assert padded_vocab(128_256) == 128_256 and padded_vocab(32_000) == 32_000
    assert padded_vocab(49_153) == 49_216 and padded_vocab(1) == 64


def test_refusals_in_vllms_words():
    with pytest.raises(ValueError, match=r"^Total number of attention heads \(32\) must be divisible by tensor "
                                         r"parallel size \(3\)\.$"):
        vllm_startup(LLAMA, tensor_parallel_size=3)
    with pytest.raises(ValueError, match=r"^152064 is not divisible by 7$"):  # 28 heads divide by 7; the vocabulary not
        vllm_startup("Qwen/Qwen2.5-7B", tensor_parallel_size=7)
    # Qwen3-14B at tensor_parallel_size 5, as llm-d-planner's failed start-up logged it (40 heads, 8 KV heads)
    qwen3 = types.SimpleNamespace(num_attention_heads=40, num_key_value_heads=8, vocab_size=151_936,
                                  intermediate_size=17_408, num_hidden_layers=40)
    with pytest.raises(ValueError, match=r"^151936 is not divisible by 5$"):
        check_split(qwen3, 5, 1)
    with pytest.raises(ValueError, match="pipeline_parallel_size 33 is more than the 32 layers"):
        vllm_startup(LLAMA, pipeline_parallel_size=33)
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="tensor_parallel_size"):
            vllm_startup(LLAMA, tensor_parallel_size=bad)


def test_a_ranks_shapes_and_its_kv_heads_split_or_replicated():
    config = load_config(LLAMA)
    for tp, kv_heads in ((1, 8), (2, 4), (8, 1), (16, 1)):  # 8 KV heads: above 8 ranks each is replicated
        text = rank_config(config, Split(tp, 1, 0, 0, 32))
        assert (text.num_attention_heads, text.num_key_value_heads) == (32 // tp, kv_heads)
        assert (text.head_dim, text.hidden_size) == (128, 4096)
        assert text.intermediate_size * tp == 14_336 and text.vocab_size * tp == 128_256
        assert kv_bytes_per_token(text) == 2 * 32 * kv_heads * 128 * 2
    stage = rank_config(config, Split(2, 4, 3, 24, 32))
    assert stage.num_hidden_layers == 8 and kv_bytes_per_token(stage) == 2 * 8 * 4 * 128 * 2


def _llama_rank_parameters(tp: int, layers: int, embedding: bool, head: bool) -> int:
    """Llama-3.1-8B's parameters on one rank, from its shard shapes: q, k, v, o, gate, up, down and two norms per
    layer; the embedding, the final norm and the head where the stage holds them."""
    hidden, inter, vocab, q, kv = 4096, 14_336 // tp, 128_256 // tp, 4096 // tp, 1024 // tp
    layer = hidden * (q + 2 * kv) + q * hidden + 3 * hidden * inter + 2 * hidden
    return layers * layer + (vocab * hidden if embedding else 0) + (vocab * hidden + hidden if head else 0)


@pytest.mark.slow
def test_weights_per_rank_are_the_shard_shapes():
    tp2 = vllm_startup(LLAMA, max_model_len=8192, tensor_parallel_size=2)
    assert tp2.parameter_count == _llama_rank_parameters(2, 32, True, True)
    assert tp2.weights_bytes == pytest.approx(2 * tp2.parameter_count, abs=2**20)  # bfloat16, a rotary table besides
    assert tp2.kv_bytes_per_token == 2 * 32 * 4 * 128 * 2 and tp2.non_torch_bytes == round(2.07 * GiB)
    pp2 = vllm_startup(LLAMA, max_model_len=8192, pipeline_parallel_size=2)
    first, last = pp2, pp2.other_stages[0]
    assert (first.layers, last.layers) == ((0, 16), (16, 32))
    assert first.parameter_count == _llama_rank_parameters(1, 16, True, False)
    assert last.parameter_count == _llama_rank_parameters(1, 16, False, True)
    assert first.parameter_count + last.parameter_count == 8_030_261_248  # every weight on exactly one stage
    assert pp2.num_blocks == min(first.own_blocks, last.own_blocks) and pp2.kv_tokens == 16 * pp2.num_blocks
    assert last.activation_peak_bytes > 0 and first.activation_peak_bytes > 0
    assert any(line.startswith("  stage 1 (layers 16-31)") for line in pp2.lines())


@pytest.mark.slow
def test_a_rank_whose_weights_exceed_its_card_is_refused():
    """LLaMA 65B in bfloat16 (121.6 GiB): half of it on each of two 24 GB cards is still more than a card."""
    with pytest.raises(ValueError, match=r"^CUDA out of memory: weights take 60\.8\d GiB, more than the whole card's "
                                         r"23\.\d\d GiB"):
        vllm_startup("huggyllama/llama-65b", max_model_len=2048, gpu="RTX 4090 24 GB", tensor_parallel_size=2)
    assert vllm_startup("huggyllama/llama-65b", max_model_len=2048, tensor_parallel_size=2).kv_tokens > 0


def test_each_parallel_log_adds_up_as_vllm_computes():
    """Rank 0's logged figures obey vLLM's arithmetic; the tokens are the binding rank's blocks of 16 over its KV
    heads and layers (the last stage under pipeline parallelism)."""
    for log in PARALLEL_LOGS:
        logged, options = log.logged, log.options
        requested = log.total_gib * options["gpu_memory_utilization"]
        assert logged["kv"] == pytest.approx(requested - logged["weights"] - logged["activation"]
                                             - logged["non_torch"], abs=0.025), log.name
        tp, pp = options["tensor_parallel_size"], options["pipeline_parallel_size"]
        text = load_config(log.model).get_text_config()
        layers = stage_layers(text.num_hidden_layers, pp)[-1]
        binding = rank_config(load_config(log.model), Split(tp, pp, pp - 1, *layers))
        per_token = kv_bytes_per_token(binding, options.get("dtype", "bfloat16"))
        kv = logged["kv"] if pp == 1 else requested - logged["last_weights"] - logged["last_activation"] - logged[
            "non_torch"]
        assert logged["tokens"] % 16 == 0 and logged["tokens"] * per_token / GiB == pytest.approx(kv, abs=0.02)
        assert logged["concurrency"] == pytest.approx(logged["tokens"] / 8192, abs=0.006), log.name


@pytest.mark.slow
def test_the_engine_beside_the_parallel_logs():
    """Weights per rank within 2%; the sampler pass's stage (every rank but a pipeline's earlier stages) within 3% of
    the logged activation peak (a pipeline's last stage, with the two buffers it receives its input in made inside the
    run: 1.97 GiB against 2.01, 2% under), an earlier stage's forward pass alone within 18% (0.91 against 1.10: what
    was checked is in helpers.teaching.vllm_logs); KV tokens within 0.5% (a pipeline's, set by its last stage: 0.15%),
    but the 72B at TP 2, whose 3 GiB of KV cache make its 0.05 GiB of activation and 0.09 GiB of weights 4.6% of its
    tokens: within 5%."""
    rows = engine_beside_logs(PARALLEL_LOGS)
    assert len(rows) >= 10
    for row in rows:
        engine, logged, name = row.engine(), row.log.logged, row.log.name
        assert row.refusal is None, name
        assert engine["weights"] == pytest.approx(logged["weights"], rel=0.02), name
        assert engine.get("last_weights", 0) == pytest.approx(logged.get("last_weights", 0), rel=0.02), name
        piped = "last_activation" in logged
        assert engine["activation"] == pytest.approx(logged["activation"], rel=0.18 if piped else 0.03), name
        assert engine.get("last_activation", 0) == pytest.approx(logged.get("last_activation", 0), rel=0.02), name
        assert engine.get("last_activation", 0) <= logged.get("last_activation", 0), name
        bound = 0.05 if logged["kv"] < 5 else 0.0015 if piped else 0.005
        assert engine["tokens"] == pytest.approx(logged["tokens"], rel=bound), name


SMOL = "HuggingFaceTB/SmolLM2-135M"  # 9 heads, 3 KV heads, 30 layers, a tied head


def test_a_tied_head_is_held_by_the_last_stage_too():
    """SmolLM2's head is its embedding: under pipeline parallelism the first stage holds it as the embedding and the
    last as the head (``LlamaModel.__init__``: ``is_first_rank or (tie_word_embeddings and is_last_rank)``)."""
    whole = vllm_startup(SMOL, max_model_len=4096)
    pp2 = vllm_startup(SMOL, max_model_len=4096, pipeline_parallel_size=2)
    embedding = 49_152 * 576
    assert pp2.parameter_count + pp2.other_stages[0].parameter_count == whole.parameter_count + embedding
    assert pp2.non_torch_bytes == round(0.07 * GiB) and whole.non_torch_bytes == round(0.16 * GiB)
    tp3 = vllm_startup(SMOL, max_model_len=4096, tensor_parallel_size=3, non_torch_bytes=0)
    assert tp3.kv_bytes_per_token * 3 == whole.kv_bytes_per_token and tp3.non_torch_bytes == 0


def test_the_command_line_takes_vllms_option_names(capsys):
    from helpers.__main__ import main

    assert main(["serve", SMOL, "--max-model-len", "4096", "--tp", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == vllm_startup(SMOL, max_model_len=4096, tensor_parallel_size=3).lines()
    assert "3 GPUs (tensor_parallel_size 3, pipeline_parallel_size 1): per GPU, rank 0's" in out[0]
    assert main(["serve", SMOL, "--max-model-len", "4096", "--pipeline-parallel-size", "2"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("  stage 1 (layers 15-29): weights")
    for flags in (["-tp", "2"], ["--tensor-parallel-size", "4"]):
        with pytest.raises(SystemExit) as exit_info:
            raise SystemExit(main(["serve", SMOL, *flags]))
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "must be divisible by tensor parallel size" in err[0], err
