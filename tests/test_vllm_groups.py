"""vLLM v0.19.0's KV cache groups (helpers.vllm_kv, the account's kv_groups), and the published start-ups of models
with sliding-window layers beside the engine (issue 53: on fully stated single-card logs the activation peak within
10%, the KV tokens within 1%; the weights within 1%)."""

import math

import pytest
import torch
import transformers

from helpers.hf_config import FOR_LOGS, SHIPPED, load_config
from helpers.models import hf
from helpers.serving import StartupAccount, kv_bytes_per_token, kv_cache_groups, vllm_startup
from helpers.teaching.vllm_logs import GEMMA_7B, SLIDING_LOGS, engine_beside_logs
from helpers.units import GiB
from helpers.vllm_kv import kv_groups
from helpers.vllm_rules import Split, rank_config

GEMMA2 = "google/gemma-2-9b-it"


def _gemma3(layers: int) -> list:
    """Gemma-3's pattern (transformers' Gemma3TextConfig: five sliding-window layers of 1,024 tokens, then one full)."""
    return [None if (i + 1) % 6 == 0 else 1024 for i in range(layers)]


def test_layers_grouped_as_vllm_groups_them():
    gemma2 = kv_groups([4096, None] * 21)  # Gemma-2 9B: 21 sliding, 21 full
    assert (gemma2.windows, gemma2.group_size, gemma2.padded_layers) == ((4096, None), 21, 42)
    # Gemma-3 4B: 29 sliding in ceil(29 / 5) = 6 groups of 5 (one padding layer), 5 full in 1: 7 groups, 35 pages
    four = kv_groups(_gemma3(34))
    assert (four.windows.count(1024), four.windows.count(None), four.group_size, four.padded_layers) == (6, 1, 5, 35)
    assert kv_groups(_gemma3(48)).windows.count(1024) == 5 and kv_groups(_gemma3(62)).padded_layers == 70
    # fewer than 1.5 times the fewest: the most is the group size (gpt-oss-20b with a drafter's layer, 12 + 13)
    assert kv_groups([128] * 12 + [None] * 13).group_size == 13
    # all alike: one group of every layer (Mistral 7B v0.1: a window on every layer; Llama: none)
    assert kv_groups([4096] * 32) == kv_groups([4096] * 32).__class__((4096,), 32, 32)
    assert kv_cache_groups("meta-llama/Llama-3.1-8B").windows == (None,)
    with pytest.raises(ValueError, match="no attention layers"):
        kv_groups([])


def test_a_request_needs_its_window_not_its_length_in_a_sliding_group():
    groups = kv_groups(_gemma3(48))  # Gemma-3 12B: 5 sliding groups, 1 full
    # full: ceil(8192 / 16) = 512 pages; sliding: ceil(min(1024 - 1 + 8192, 8192) / 16) + 1 = 513
    assert groups.pages_per_request(8192, 8192, 16) == 512 + 5 * 513
    # a budget of 2,048 tokens a step: a sliding layer holds 1,023 + 2,048 tokens, 192 + 1 pages
    assert groups.pages_per_request(32768, 2048, 16) == 2048 + 5 * 193
    # llm-d-planner's v0.19.0 logs of Gemma-3 4B, 12B and 27B (34, 48 and 62 layers; traced as engine rows in
    # SLIDING_LOGS), by their logged blocks: the tokens are blocks // groups x 16 and the concurrency the blocks over
    # a request's pages, exactly as printed (which the groups of 34, 48 and 62 layers of this pattern give: 7, 6, 7)
    for layers, blocks, tokens, concurrency in ((34, 204_817, 468_144, 57.05), (48, 48_867, 130_304, 15.88),
                                                (62, 15_997, 36_560, 4.46)):
        three = kv_groups(_gemma3(layers))
        assert blocks // len(three.windows) * 16 == tokens
        assert round(blocks / three.pages_per_request(8192, 8192, 16), 2) == concurrency


def test_a_gemma3_1b_log_of_v0_13_adds_up_by_the_groups_rule():
    """Gemma-3 1B (text only) on vLLM v0.13.0, ``LLM(model="google/gemma-3-1b-it", max_model_len=2048,
    gpu_memory_utilization=0.95)``, as eole-nlp/eole's benchmarks/genai/results.md logs it (commit 6633d06,
    https://github.com/eole-nlp/eole/blob/6633d065dba3b01eea1d2152016464b1e242ac33/benchmarks/genai/results.md):
    "Available KV cache memory: 25.39 GiB", "Add 2 padding layers", "GPU KV cache size: 950,864 tokens", "Maximum
    concurrency for 2,048 tokens per request: 461.21x", max_num_batched_tokens 8,192 as printed.  Not an engine row:
    the card and its total are not stated and v0.13 prints no activation peak, so only the grouped arithmetic is
    checked.  The shape is an input here, not a shipped config (the Hub's config.json was not read in this
    session): 26 layers, every sixth full attention as transformers' Gemma3TextConfig builds layer_types, a window of
    512, 1 KV head of 256 (2 x 1 x 256 x 2 bytes per token per layer); the log's own figures bear it out: 22 sliding
    layers in 6 groups of 4 (the 2 padding layers it warns of), 4 full in 1, a block of 65,536 bytes (a 16-token page
    in each of 4 pools) that the printed memory, tokens and concurrency all agree with.  At 2,048 tokens the window
    changes no figure (it caps no request)."""
    groups = kv_groups([None if (i + 1) % 6 == 0 else 512 for i in range(26)])
    assert (groups.windows.count(512), groups.windows.count(None), groups.group_size) == (6, 1, 4)
    assert groups.padded_layers - groups.layers == 2  # "Add 2 padding layers"
    block = groups.group_size * 16 * 2 * 1 * 256 * 2
    pages = groups.pages_per_request(2048, 8192, 16)  # 128 full pages + 6 x (128 + 1)
    assert pages == 128 + 6 * 129
    # the blocks that give all three printed figures at once: the tokens exactly, the rest as rounded in the log
    fits = [b for b in range(400_000, 430_000) if b // len(groups.windows) * 16 == 950_864
            and round(b / pages, 2) == 461.21 and round(b * block / GiB, 2) == 25.39]
    assert fits == [416_007, 416_008, 416_009]
    # the same memory under one group of all 26 layers (no grouping) would give other tokens: the rule is tested
    assert 416_008 * block // (26 * 2 * 256 * 2) != 950_864


def test_which_layers_slide_as_vllm_reads_the_config():
    assert kv_cache_groups(GEMMA2).windows == (4096, None)
    mistral_v01 = dict(load_config("mistralai/Mistral-7B-v0.3").to_dict(), sliding_window=4096)
    assert kv_cache_groups(mistral_v01).windows == (4096,)  # no layer_types: the window on every layer
    assert kv_cache_groups("Qwen/Qwen2.5-7B").windows == (None,)  # use_sliding_window false


def test_bytes_per_token_count_the_groups_padded_layers():
    assert kv_bytes_per_token(GEMMA2) == 2 * 42 * 8 * 256 * 2  # no padding: 21 + 21
    shard = rank_config(load_config(GEMMA2), Split(2, 1, 0, 0, 42))  # tensor parallelism: half the KV heads
    assert kv_bytes_per_token(shard) * 2 == kv_bytes_per_token(GEMMA2) and kv_cache_groups(shard).windows == (4096, None)
    for name in SHIPPED:  # full attention everywhere: one group, as before
        text = load_config(name).get_text_config()
        assert kv_cache_groups(name).padded_layers == text.num_hidden_layers


def test_what_is_still_refused_and_why():
    deepseek = dict(model_type="deepseek_v2", kv_lora_rank=512, num_attention_heads=16, hidden_size=2048,
                    num_hidden_layers=2, max_position_embeddings=4096)
    with pytest.raises(ValueError, match=r"latent attention \(MLA\) caches a compressed latent"):
        kv_bytes_per_token(deepseek)
    llama4 = dict(load_config("meta-llama/Llama-3.1-8B").to_dict(), attention_chunk_size=8192)
    with pytest.raises(ValueError, match="chunked local attention"):
        kv_bytes_per_token(llama4)
    with pytest.raises(ValueError, match="^google/gemma-2-9b-it: sliding-window layers .* not under pipeline"):
        vllm_startup(GEMMA2, pipeline_parallel_size=2)
    with pytest.raises(ValueError, match="not under vLLM V0's rules"):
        vllm_startup(GEMMA2, version="0.6.5")


@pytest.mark.parametrize("name", list(FOR_LOGS))
def test_every_config_for_the_logs_builds_with_its_published_count(name):
    """Each builds on fake tensors with the pinned transformers' Gemma classes, tied, with the count the Hub's page
    rounds (2.61B, 9.24B, 27.2B, 8.54B); Gemma-2 2B's 2,614,341,888 by hand: 26 layers of q, k, v, o (2304 x 2048,
    2 x 2304 x 1024, 2048 x 2304), the MLP (3 x 2304 x 9216) and four norms, the embedding, the final norm."""
    with torch.device("meta"):
        if "gemma-3" in name:  # multimodal: the language model, the vision tower and the projector
            model = transformers.Gemma3ForConditionalGeneration(load_config(name))
        else:
            model = hf.build_causal_lm(name, attn_implementation="eager")
    count = sum(p.numel() for p in model.parameters())
    published = FOR_LOGS[name].parameters
    assert f"{count / 1e9:.{len(published.split('.')[1]) - 1}f}B" == published
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert type(model).__name__ == ("Gemma2ForCausalLM" if "gemma-2" in name else "GemmaForCausalLM" if "gemma-7b" in
                                    name else "Gemma3ForConditionalGeneration")
    if name == "google/gemma-2-2b-it":
        layer = 2 * 2304 * 2048 + 2 * 2304 * 1024 + 3 * 2304 * 9216 + 4 * 2304
        assert count == 26 * layer + 256_000 * 2304 + 2304 == 2_614_341_888


@pytest.mark.parametrize("log", [*SLIDING_LOGS, GEMMA_7B], ids=lambda log: log.name)
def test_each_log_adds_up_by_its_groups(log):
    """The logged figures obey v0.19.0's grouped arithmetic: the blocks are the available KV memory (printed to 0.01
    GiB) over a page in each of group-size pools; the tokens are blocks // groups x 16, exactly; the concurrency the
    blocks over a request's pages, exactly as printed."""
    logged, groups = log.logged, kv_cache_groups(log.model)
    assert log.model in FOR_LOGS
    pool_block = kv_bytes_per_token(log.model) * 16 // len(groups.windows)  # a page in each of group_size pools
    assert logged["blocks"] == pytest.approx(logged["kv"] * GiB / pool_block, abs=0.005 * GiB / pool_block + 1)
    assert logged["tokens"] == logged["blocks"] // len(groups.windows) * 16
    pages = groups.pages_per_request(8192, 8192, 16)
    assert round(logged["blocks"] / pages, 2) == logged["concurrency"]
    left = log.total_gib * 0.95 - (logged["weights"] + logged["activation"] + logged["non_torch"])
    assert logged["kv"] == pytest.approx(left, abs=0.025)


@pytest.fixture(scope="module")
def rows():
    return {row.log.name: row for row in engine_beside_logs((*SLIDING_LOGS, GEMMA_7B))}


def test_the_engine_beside_the_sliding_logs(rows):
    for name, row in rows.items():
        engine, logged = row.engine(), row.log.logged
        assert row.refusal is None, name
        assert engine["weights"] == pytest.approx(logged["weights"], rel=0.01), name
        # the sampler pass on [1,024, 256,000] float32 logits sets the peak, as in the log
        assert engine["activation"] == pytest.approx(logged["activation"], rel=0.1), name
        assert engine["tokens"] == pytest.approx(logged["tokens"], rel=0.01), name
        assert engine["concurrency"] == pytest.approx(logged["concurrency"], rel=0.01), name
        account = row.account
        assert account.kv_tokens == account.num_blocks // account.groups * 16
        assert math.isclose(account.max_concurrency, account.num_blocks / account.pages_per_request)
    assert rows[SLIDING_LOGS[0].name].account.groups == 2 and rows[GEMMA_7B.name].account.groups == 1
    # per rank under tensor parallelism: half the KV heads, the same groups (no published log to compare)
    one, two = rows[SLIDING_LOGS[1].name].account, vllm_startup(GEMMA2, max_model_len=8192, tensor_parallel_size=2)
    assert two.kv_groups == one.kv_groups and two.kv_bytes_per_token * 2 == one.kv_bytes_per_token
    assert two.weights_bytes < one.weights_bytes / 2 + 0.6 * GiB  # the 256,000 x 3,584 embedding split too


def test_the_gemma3_rows_as_close_as_measured(rows):
    """Gemma-3 4B, 12B and 27B with their vision tower (helpers.vllm_mm): the weights 0.09-0.20% under the logged
    ones (the tower, the projector and vLLM's rotary tables counted), the activation peak 0.86-1.07% under (the
    sampler's float32 logits after the text pass, the encoder's pixels and embeddings held beside them), the tokens
    0.08-0.57% over."""
    for log in SLIDING_LOGS[3:]:
        row = rows[log.name]
        engine, logged = row.engine(), log.logged
        assert row.account.model == log.model and row.account.groups == (6 if "12b" in log.model else 7)
        assert 0.997 < engine["weights"] / logged["weights"] < 1.0, log.name
        assert 0.985 < engine["activation"] / logged["activation"] < 0.995, log.name
        assert 1.0 < engine["tokens"] / logged["tokens"] < 1.007, log.name


def _account(blocks: int) -> StartupAccount:
    """An account of Gemma-2 2B's cache shape (26 layers of 4 KV heads of 256, two groups) with exactly ``blocks`` of
    vLLM's blocks available (a page in each of 13 pools), at max_model_len 8,192 and a 2,048-token budget."""
    pool_block = 13 * 2 * 16 * 4 * 256 * 2
    return StartupAccount(model="gemma-2-2b shape", version="0.11", gpu="a GPU", total_bytes=blocks * pool_block,
                          gpu_memory_utilization=1.0, dtype="bfloat16", quantization="none", kv_cache_dtype="auto",
                          block_size=16, max_model_len=8192, max_num_batched_tokens=2048, max_num_seqs=256,
                          num_reqs=256, parameter_count=0, weights_bytes=0, activation_peak_bytes=0,
                          non_torch_bytes=0, kv_bytes_per_token=2 * 26 * 4 * 256 * 2,
                          kv_groups=kv_groups([4096, None] * 13))


def test_one_request_needs_its_groups_pages_and_the_refusal_says_the_longest_that_fits():
    # a request of 8,192: 512 full-attention pages, ceil((4,095 + 2,048) / 16) + 1 = 385 sliding ones
    assert _account(897).pages_per_request == 897 and _account(897).refusal is None
    assert _account(897).max_concurrency == 1.0 and _account(897).kv_tokens == 448 * 16
    short = _account(896)
    # the longest that fits is 8,176 tokens (511 full pages + 385), more than the 7,168 tokens vLLM reports
    assert short.longest_fitting == 8176 and short.kv_tokens == 7168
    # 897 blocks of 13 pages: 0.71 GiB, more than the 896's 0.71 (both printed to two decimals)
    assert short.refusal.startswith("one sequence of max_model_len 8,192 tokens needs 0.71 GiB of KV cache")
    assert "the longest that fits is 8,176 tokens" in short.refusal
