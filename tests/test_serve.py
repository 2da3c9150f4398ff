"""``memtheory serve`` and ``serving_memory``: every figure derived here from the model's config.

Llama-3.1-70B's configuration (https://huggingface.co/meta-llama/Llama-3.1-70B, config.json,
as memtheory's preset holds it): 80 layers, hidden 8192, 64 query heads, 8 key/value heads
(head_dim 8192 / 64 = 128), MLP width 28672, vocabulary 128256. Llama-3-8B's: 32 layers, hidden
4096, 32 heads, 8 key/value heads, MLP width 14336, vocabulary 128256.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memtheory.cli import main
from memtheory.errors import InvalidArgumentError, UnknownNameError, UnsupportedError
from memtheory.estimate import ServingMemory, serving_memory
from memtheory.models.presets import PRESETS

GIB = 2**30


def _sizes(name: str) -> dict[str, int]:
    config = PRESETS[name].config
    heads = config["num_attention_heads"]
    return {
        "layers": config["num_hidden_layers"],
        "hidden": config["hidden_size"],
        "heads": heads,
        "kv": config["num_key_value_heads"],
        "d": config["hidden_size"] // heads,
        "ffn": config["intermediate_size"],
        "vocab": config["vocab_size"],
    }


def _matrices(c: dict[str, int], t: int = 1) -> list[tuple[int, int]]:
    """Every decoder layer's linear maps as (out, in), split over t GPUs (Megatron-style)."""
    h, d, f = c["hidden"], c["d"], c["ffn"]
    q, kv = c["heads"] * d // t, max(1, c["kv"] // t) * d
    one = [(q, h), (kv, h), (kv, h), (h, q), (f // t, h), (f // t, h), (h, f // t)]
    return one * c["layers"]


def _unquantised(c: dict[str, int], t: int = 1) -> int:
    """Elements kept 16-bit: embedding and lm_head (vocabulary rows split), every RMS norm."""
    return 2 * -(-c["vocab"] // t) * c["hidden"] + (2 * c["layers"] + 1) * c["hidden"]


def _kv_per_sequence(c: dict[str, int], context: int, element: int = 2, t: int = 1) -> int:
    blocks = -(-context // 16)
    return 2 * c["layers"] * max(1, c["kv"] // t) * c["d"] * blocks * 16 * element


def test_llama_31_70b_kv_cache_at_32k_is_the_cited_ten_gib() -> None:
    """One 32k sequence of Llama-3.1-70B caches 2*80*8*128*2*32768 bytes in bf16: 10 GiB."""
    answer = serving_memory("llama-3.1-70b", context=32768, batch=1)
    assert answer.kv_per_sequence == 2 * 80 * 8 * 128 * 2 * 32768
    assert answer.format("GiB", name="kv_cache") == "10.00 GiB"
    assert answer.weights == 2 * (sum(o * i for o, i in _matrices(_sizes("llama-3.1-70b")))
                                  + _unquantised(_sizes("llama-3.1-70b")))
    assert answer.format("GiB", name="weights") == "131.42 GiB"


def test_paged_cache_rounds_each_sequence_up_to_whole_blocks() -> None:
    """A context of 17 tokens takes two blocks of 16: 32 positions' keys and values."""
    c = _sizes("llama-3-8b")
    answer = serving_memory("llama-3-8b", context=17, batch=3)
    assert answer.kv_per_sequence == _kv_per_sequence(c, 17) == _kv_per_sequence(c, 32)
    assert answer.components["kv_cache"] == 3 * answer.kv_per_sequence


def test_fp8_cache_holds_one_byte_per_element() -> None:
    """--kv-cache fp8 halves the bf16 cache."""
    c = _sizes("llama-3-8b")
    answer = serving_memory("llama-3-8b", context=4096, batch=1, kv_cache="fp8")
    assert answer.kv_per_sequence == _kv_per_sequence(c, 4096, element=1)


@pytest.mark.parametrize(
    ("form", "per_matrix"),
    [
        # AWQ: 4 bits a weight, an fp16 scale and a 4-bit zero per 128 inputs of each output
        ("awq", lambda o, i: o * i // 2 + o * (i // 128) * 2 + o * (i // 128) // 2),
        # GPTQ: the same and an int32 group index per input feature
        ("gptq", lambda o, i: o * i // 2 + o * (i // 128) * 2 + o * (i // 128) // 2 + 4 * i),
        # int8: one byte a weight, one fp32 scale per output row
        ("int8", lambda o, i: o * i + 4 * o),
        # NF4 (QLoRA, Section 3): 4 bits, one 8-bit constant per 64, one fp32 per 256 of those
        ("nf4", lambda o, i: o * i // 2 + math.ceil(o * i / 64)
         + 4 * math.ceil(math.ceil(o * i / 64) / 256)),
    ],
)
def test_quantised_weights_keep_embeddings_norms_and_lm_head_16_bit(form, per_matrix) -> None:
    """Linear maps in the format, the rest 2 bytes an element: derived from the config."""
    c = _sizes("llama-3-8b")
    answer = serving_memory("llama-3-8b", context=1024, batch=1, weights=form)
    expected = sum(per_matrix(o, i) for o, i in _matrices(c)) + 2 * _unquantised(c)
    assert answer.weights == expected


def test_tensor_parallel_awq_splits_heads_width_and_vocabulary() -> None:
    """Over 2 GPUs each keeps half the heads, MLP width and vocabulary rows; norms whole."""
    c = _sizes("llama-3.1-70b")
    answer = serving_memory("llama-3.1-70b", context=8192, weights="awq", gpu="H100", tensor=2)
    awq = sum(o * i // 2 + o * (i // 128) * 5 // 2 for o, i in _matrices(c, 2))
    assert answer.weights == awq + 2 * _unquantised(c, 2)
    assert answer.kv_per_sequence == _kv_per_sequence(c, 8192, t=2)


def test_max_concurrency_is_vllms_blocks_over_blocks_per_sequence() -> None:
    """KV blocks: floor((0.9 x 24 GiB - 1.5 GiB - weights - profiled peak) / block bytes)."""
    c = _sizes("llama-3-8b")
    answer = serving_memory("llama-3-8b", context=4096, gpu="L4")
    block = 2 * c["layers"] * c["kv"] * c["d"] * 16 * 2
    assert answer.block_bytes == block
    free = 0.9 * 24 * GIB - 1.5 * GIB - int(answer.weights) - int(answer.prefill)
    assert answer.blocks == math.floor(free / block)
    assert answer.max_concurrency == answer.blocks // math.ceil(4096 / 16)
    assert answer.batch == answer.max_concurrency > 0


def test_max_concurrency_fits_and_one_more_does_not() -> None:
    """The batch at max_concurrency fits the budget; one sequence more does not."""
    most = serving_memory("llama-3-8b", context=4096, gpu="L4").max_concurrency
    assert most is not None
    assert serving_memory("llama-3-8b", context=4096, gpu="L4", batch=most).fits
    over = serving_memory("llama-3-8b", context=4096, gpu="L4", batch=most + 1)
    assert over.fits is False
    assert "does NOT fit" in over.report()


def test_a_model_too_large_does_not_fit_and_fits_no_sequence() -> None:
    """Llama-3.1-70B in bf16 (131 GiB of weights) on one 24 GiB L4: nothing fits."""
    answer = serving_memory("llama-3.1-70b", context=8192, gpu="L4")
    assert answer.max_concurrency == 0
    assert answer.blocks == 0
    assert answer.fits is False
    assert "does NOT fit" in answer.report()


def test_prefill_and_decode_are_the_timeline_and_the_larger_is_the_activations() -> None:
    """Two moments, prefill and decode, each weights + cache + that phase's working memory."""
    answer = serving_memory("llama-3-8b", context=4096, gpu="L4")
    held = answer.weights + answer.components["kv_cache"]
    assert set(answer.timeline) == {"prefill", "decode"}
    assert answer.timeline["prefill"] == held + answer.prefill
    assert answer.components["activations"] == max(
        answer.timeline["prefill"], answer.timeline["decode"]
    ) - held
    assert answer.peak == held + answer.components["activations"]


def test_a_draft_model_adds_its_weights_and_cache() -> None:
    """Speculative decoding: target plus draft, weights and cache per sequence."""
    both = serving_memory("llama-3.1-70b", context=4096, batch=2, draft="llama-3.1-8b")
    target = serving_memory("llama-3.1-70b", context=4096, batch=2)
    draft = serving_memory("llama-3.1-8b", context=4096, batch=2)
    assert both.weights == target.weights + draft.weights
    assert both.kv_per_sequence == target.kv_per_sequence + draft.kv_per_sequence
    assert both.block_bytes == target.block_bytes + draft.block_bytes


def test_a_config_json_gives_what_the_preset_gives(tmp_path) -> None:
    """A Hugging Face config.json path resolves as the preset of the same configuration."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(PRESETS["llama-3-8b"].config)))
    from_file = serving_memory(str(path), context=2048, batch=2, weights="bf16")
    preset = serving_memory("llama-3-8b", context=2048, batch=2, weights="bf16")
    assert from_file.components == preset.components


@pytest.mark.slow
@settings(max_examples=8, deadline=None)
@given(context=st.integers(1, 8192), extra=st.integers(1, 4096))
def test_longer_sequences_never_fit_more_of_them(context: int, extra: int) -> None:
    """Max concurrency does not grow with the context."""
    short = serving_memory("llama-3-8b", context=context, gpu="L4", weights="awq")
    longer = serving_memory(
        "llama-3-8b", context=min(8192, context + extra), gpu="L4", weights="awq"
    )
    assert short.max_concurrency is not None and longer.max_concurrency is not None
    assert longer.max_concurrency <= short.max_concurrency


def test_cli_json_equals_the_api(capsys) -> None:
    """The output of `memtheory serve --json` is serving_memory(...).to_dict()."""
    argv = ["serve", "llama-3.1-70b", "--context", "8192", "--weights", "awq", "--gpu", "H100",
            "--tp", "2", "--json"]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    api = serving_memory("llama-3.1-70b", context=8192, weights="awq", gpu="H100", tensor=2)
    assert printed == json.loads(json.dumps(api.to_dict()))


def test_cli_reports_a_model_too_large(capsys) -> None:
    """The text answer says "does NOT fit" and a max concurrency of 0; exit 0."""
    assert main(["serve", "llama-3.1-70b", "--context", "8192", "--gpu", "L4"]) == 0
    out = capsys.readouterr().out
    assert "does NOT fit" in out
    assert "max concurrency at 8192 tokens: 0 sequences" in out


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        (["--context", "0"], "context must be a whole number of at least 1"),
        (["--context", "4096", "--gpu-memory-utilization", "1.5"], "at most 1"),
        (["--context", "4096", "--gpu-memory-utilization", "0"], "above 0"),
        (["--context", "4096", "--weights", "int3"], "unknown weight format 'int3'"),
        (["--context", "4096", "--kv-cache", "fp4"], "unknown KV-cache dtype 'fp4'"),
        (["--context", "100000"], "longer than llama-3-8b's 8192 positions"),
        (["--context", "4096", "--tp", "3"], "divides 32"),
        (["--context", "4096", "--block-size", "0"], "block_size must be"),
    ],
)
def test_cli_bad_input_is_a_clear_error_and_exit_2(capsys, arguments, words) -> None:
    """Bad input: one line naming the problem, on stderr, exit status 2, no traceback."""
    assert main(["serve", "llama-3-8b", "--gpu", "L4", *arguments]) == 2
    captured = capsys.readouterr()
    assert words in captured.err
    assert captured.err.startswith("memtheory serve: ")
    assert "Traceback" not in captured.err


def test_api_bad_input_raises_memtheory_errors() -> None:
    """The API raises the matching memtheory errors."""
    with pytest.raises(InvalidArgumentError, match="context"):
        serving_memory("llama-3-8b", context=0, gpu="L4")
    with pytest.raises(InvalidArgumentError, match="utilization"):
        serving_memory("llama-3-8b", context=1024, gpu="L4", utilization=1.5)
    with pytest.raises(UnknownNameError, match="weight format"):
        serving_memory("llama-3-8b", context=1024, gpu="L4", weights="q4_k_m")
    with pytest.raises(InvalidArgumentError, match="needs a card"):
        serving_memory("llama-3-8b", context=1024)
    with pytest.raises(UnsupportedError, match="tensor parallelism"):
        serving_memory("gpt2", context=1024, gpu="L4", tensor=2)


_TINY = {  # a small Llama-style config, so that each example is quick
    "model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 4096, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}


@settings(max_examples=15, deadline=None)
@given(
    context=st.integers(1, 4096),
    share=st.integers(30, 99),
    more=st.integers(1, 10),
)
def test_max_concurrency_is_the_boundary_and_grows_with_utilization(
    context: int, share: int, more: int
) -> None:
    """At max_concurrency the batch fits, one more does not; a larger share never fits fewer."""
    def ask(percent: int, batch: int | str = "auto") -> ServingMemory:
        return serving_memory(_TINY, context=context, batch=batch, limit="64 MiB",
                              reserve=0, utilization=f"{percent / 100}", batched_tokens=256)

    answer = ask(share)
    most = answer.max_concurrency
    assert most is not None
    per = 2 * 2 * 2 * 16 * (-(-context // 16) * 16) * 2  # 2 layers, K and V, 2 heads, d 16
    assert answer.kv_per_sequence == per
    if most > 0:
        assert ask(share, most).fits
    assert ask(share, most + 1).fits is False
    larger = ask(min(100, share + more))
    assert larger.max_concurrency is not None and larger.max_concurrency >= most


def test_a_limit_stands_for_the_card_memory() -> None:
    """limit='24 GiB' gives what the 24 GiB L4 gives."""
    card = serving_memory("llama-3-8b", context=4096, gpu="L4")
    limit = serving_memory("llama-3-8b", context=4096, limit="24 GiB")
    assert (limit.max_concurrency, limit.blocks) == (card.max_concurrency, card.blocks)


def test_deepseek_v3_serves_its_latent_cache(capsys) -> None:
    """DeepSeek-V3 from the command line: the latent cache per sequence, the estimate labelled."""
    config = PRESETS["deepseek-v3"].config
    argv = ["serve", "deepseek-v3", "--context", "32768", "--limit", "1200 GiB",
            "--weights", "int8", "--json"]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    # per sequence: 61 layers x 32768 positions x (kv_lora_rank 512 + qk_rope_head_dim 64), bf16
    per_position = config["kv_lora_rank"] + config["qk_rope_head_dim"]
    expected = config["num_hidden_layers"] * 32768 * per_position * 2
    api = serving_memory("deepseek-v3", context=32768, limit="1200 GiB", weights="int8")
    assert api.kv_per_sequence == expected
    assert printed == json.loads(json.dumps(api.to_dict()))
    assert any("latent attention" in line and "estimate" in line
               for line in printed["assumptions"])


def test_deepseek_v3_too_large_is_not_told_to_use_tensor_parallelism(capsys) -> None:
    """MLA serving refuses --tp, so the "does NOT fit" advice does not suggest it."""
    assert main(["serve", "deepseek-v3", "--context", "4096", "--gpu", "H200",
                 "--weights", "int4"]) == 0
    out = capsys.readouterr().out
    assert "does NOT fit" in out and "--tp" not in out
    assert main(["serve", "llama-3.1-70b", "--context", "8192", "--gpu", "L4"]) == 0
    assert "--tp" in capsys.readouterr().out  # the advice still given where --tp is modelled


def test_estimate_serve_is_the_issues_command_and_equals_the_api(capsys) -> None:
    """Issue 25's command, `memtheory estimate ... --serve ... --quant awq`, answers the API's."""
    argv = ["estimate", "llama-3.1-70b", "--serve", "--context", "32768", "--gpu", "H100-80GB",
            "--quant", "awq", "--json"]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    api = serving_memory("llama-3.1-70b", context=32768, weights="awq", gpu="H100-80GB")
    assert printed == json.loads(json.dumps(api.to_dict()))
    assert printed["max_concurrency"] == api.max_concurrency >= 1


def test_estimate_serve_prints_what_serve_prints(capsys) -> None:
    """`estimate MODEL --serve` and `serve MODEL` are one command: same text, same status."""
    rest = ["--context", "4096", "--gpu", "L4", "--weights", "int8"]
    assert main(["serve", "llama-3-8b", *rest]) == 0
    served = capsys.readouterr().out
    assert main(["estimate", "llama-3-8b", *rest[:2], "--serve", *rest[2:]]) == 0
    assert capsys.readouterr().out == served


@pytest.mark.parametrize("training", [["--lora", "16"], ["--recipe", "hf-trainer"],
                                      ["--zero", "3"]])
def test_estimate_serve_refuses_a_training_option(capsys, training) -> None:
    """A training option has no effect on the serving question: refused, named, exit 2."""
    argv = ["estimate", "llama-3-8b", "--serve", "--context", "4096", "--gpu", "L4", *training]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert training[0] in captured.err and "estimate --serve" in captured.err


def test_serve_after_a_double_dash_is_not_the_flag() -> None:
    """Only options before `--` ask for serving (a model file may be named --serve)."""
    from memtheory.estimate.serve_command import serve_instead

    assert serve_instead(["--", "--serve"]) is None
    assert serve_instead(["m", "--serve", "--", "--serve"]) == ["m", "--", "--serve"]
