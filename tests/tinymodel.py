"""Tiny test models for the real vLLM CPU engine, generated locally (nothing is downloaded).

* `write_llama(dir, max_position_embeddings=4096)`: a 2-layer `LlamaForCausalLM` config (hidden 256,
  vocab 512). Serve it with `--load-format dummy`: vLLM fills the weights itself.
* `write_dsv4_config(dir, max_position_embeddings=4096)`: a tiny DeepSeek-V4 config.json (layers with
  compression ratios 0, 4 and 128). The stock CPU build cannot run DeepSeek-V4 on an AVX2 machine;
  this config is for dsv4ctl's planners (preflight, fit-length), not for the engine.
* Both get a byte-level BPE tokenizer trained here with `tokenizers` (vocab 511;
  `<｜begin▁of▁sentence｜>`=0, `<｜end▁of▁sentence｜>`=1, `<pad>`=2), saved as tokenizer.json and
  tokenizer_config.json for `PreTrainedTokenizerFast`.

Run as a script to create a model directory: `python tests/tinymodel.py llama OUT_DIR [MAX_POS]`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
PAD = "<pad>"

_CORPUS = [
    "Hello, my name is dsv4ctl and I launch vLLM servers.",
    "The quick brown fox jumps over the lazy dog.",
    "A tiny model with dummy weights answers every prompt with noise.",
    "DeepSeek-V4 uses compressed sparse attention with ratios four and one hundred twenty-eight.",
    "Operators read logs, fit context lengths and restart servers at night.",
    "0123456789 ,.;:!?()[]{}<>/\\|@#$%^&*-+=_~`'\"",
]

LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "torch_dtype": "bfloat16",
    "vocab_size": 512,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "hidden_act": "silu",
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "bos_token_id": 0,
    "eos_token_id": 1,
}

DSV4_CONFIG = {
    "architectures": ["DeepseekV4ForCausalLM"],
    "model_type": "deepseek_v4",
    "torch_dtype": "bfloat16",
    "vocab_size": 512,
    "hidden_size": 256,
    "num_hidden_layers": 3,
    "compress_ratios": [0, 4, 128, 0],
    "num_attention_heads": 16,
    "num_key_value_heads": 1,
    "head_dim": 512,
    "qk_rope_head_dim": 64,
    "q_lora_rank": 128,
    "o_lora_rank": 128,
    "o_groups": 2,
    "sliding_window": 128,
    "index_n_heads": 16,
    "index_head_dim": 128,
    "index_topk": 512,
    "hc_mult": 4,
    "hc_sinkhorn_iters": 20,
    "hc_eps": 1e-06,
    "n_routed_experts": 4,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 128,
    "num_hash_layers": 1,
    "scoring_func": "sqrtsoftplus",
    "topk_method": "noaux_tc",
    "norm_topk_prob": True,
    "routed_scaling_factor": 1.5,
    "swiglu_limit": 10.0,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000,
    "compress_rope_theta": 160000,
    "rope_scaling": {
        "type": "yarn",
        "factor": 16,
        "original_max_position_embeddings": 65536,
        "beta_fast": 32,
        "beta_slow": 1,
    },
    "max_position_embeddings": 4096,
    "num_nextn_predict_layers": 0,
    "tie_word_embeddings": False,
    "bos_token_id": 0,
    "eos_token_id": 1,
}


def write_tokenizer(directory: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=511,
        special_tokens=[BOS, EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_CORPUS * 4, trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, 0)]
    )
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": BOS,
                "eos_token": EOS,
                "pad_token": PAD,
                "add_bos_token": True,
                "model_max_length": 1 << 20,
            },
            indent=2,
        )
    )


def _write(directory: Path, config: dict, max_position_embeddings: int, tokenizer: bool) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = {**config, "max_position_embeddings": int(max_position_embeddings)}
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    (directory / "generation_config.json").write_text(json.dumps({"bos_token_id": 0, "eos_token_id": 1}))
    if tokenizer:
        write_tokenizer(directory)
    return directory


def write_llama(directory: Path, max_position_embeddings: int = 4096, tokenizer: bool = True) -> Path:
    return _write(directory, LLAMA_CONFIG, max_position_embeddings, tokenizer)


def write_dsv4_config(directory: Path, max_position_embeddings: int = 4096, tokenizer: bool = False) -> Path:
    return _write(directory, DSV4_CONFIG, max_position_embeddings, tokenizer)


def llama_kv_bytes_per_token(config: dict = LLAMA_CONFIG, dtype_bytes: int = 2) -> int:
    """K and V for every layer: 2 x layers x kv_heads x head_dim x dtype bytes (derived, for tests)."""
    return 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * config["head_dim"] * dtype_bytes


if __name__ == "__main__":  # pragma: no cover - helper for manual runs and benchmarks
    kind, out = sys.argv[1], Path(sys.argv[2])
    max_pos = int(sys.argv[3]) if len(sys.argv) > 3 else 4096
    print(write_llama(out, max_pos) if kind == "llama" else write_dsv4_config(out, max_pos, tokenizer=True))
