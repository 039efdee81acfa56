"""DeepSeek-V4 geometry: built-in ids, config.json forms, checkpoint dirs, bad inputs."""

from __future__ import annotations

import json

import pytest
from fitkit import FLASH, PRO, builtin_config, layer_types_form, make_checkpoint, no_hf_cache  # noqa: F401 - autouse fixture

from dsv4ctl.errors import InputError
from dsv4ctl.planning import load_geometry


@pytest.mark.parametrize(
    "model_id, layers, csa, hca, swa",
    [(FLASH, 43, 21, 20, 2), (PRO, 61, 30, 31, 0)],
)
def test_builtin_ids(model_id, layers, csa, hca, swa):
    g = load_geometry(model_id)
    assert (g.num_hidden_layers, g.num_csa_layers, g.num_hca_layers, g.num_swa_only_layers) == (layers, csa, hca, swa)
    assert g.model_max_model_len == 1_048_576
    assert g.max_len_key == "max_position_embeddings"
    assert g.num_nextn_predict_layers == 1
    # The preset carries no weight sizes: the hub's headers are read only when a plan asks for them.
    assert g.source == "builtin" and g.to_json()["weights"] is None and g.hub is not None and g.hub.read is None
    assert g.revision is None and "revision unknown" in g.checkpoint


def test_builtin_id_is_case_insensitive():
    assert load_geometry("DEEPSEEK-AI/deepseek-v4-flash").model == FLASH


def test_config_forms_give_the_same_geometry(tmp_path):
    legacy = make_checkpoint(tmp_path / "legacy", builtin_config(FLASH))
    upstream = make_checkpoint(tmp_path / "upstream", layer_types_form(builtin_config(FLASH)))
    a, b = load_geometry(legacy), load_geometry(upstream / "config.json")
    assert a.config_form == "compress_ratios" and b.config_form == "layer_types"
    assert a.compress_ratios == b.compress_ratios == load_geometry(FLASH).compress_ratios


def test_tokenizer_model_max_length_caps_the_model_maximum(tmp_path):
    ckpt = make_checkpoint(tmp_path / "c", builtin_config(FLASH))
    (ckpt / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 131072}))
    g = load_geometry(ckpt)
    assert g.model_max_model_len == 131072


def test_checkpoint_weights_from_safetensors_headers(tmp_path):
    shards = [
        {"model.embed_tokens.weight": 1000, "model.layers.0.ffn.experts.0.w1.weight": 5000},
        {"model.layers.1.ffn.shared_experts.w1.weight": 300, "model.layers.43.attn.wq_b.weight": 70, "mtp.0.e_proj.weight": 7},
    ]
    g = load_geometry(make_checkpoint(tmp_path / "c", builtin_config(FLASH), shards))
    assert g.weights is not None
    assert g.weights.total_bytes == 6377
    assert g.weights.expert_bytes == 5000  # shared experts stay dense
    assert g.weights.mtp_bytes == 77  # mtp.* and layers past num_hidden_layers
    assert g.weights.dense_bytes == 1300
    assert g.weights.num_files == 2


def test_non_dsv4_config_is_rejected(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32}))
    with pytest.raises(InputError, match=r"not a DeepSeek-V4 model \(model_type='llama'\)"):
        load_geometry(path)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda c: c.pop("num_hidden_layers"), "missing `num_hidden_layers`"),
        (lambda c: c.update(compress_ratios=[4, 4]), "must list at least"),
        (lambda c: c.update(compress_ratios=[7] * 44), "unsupported compression ratio 7"),
        (lambda c: c.pop("compress_ratios"), "no per-layer compression"),
        (lambda c: c.update(sliding_window=-3), "`sliding_window` must be an integer >= 1"),
    ],
)
def test_invalid_dsv4_configs(tmp_path, mutate, message):
    config = builtin_config(FLASH)
    mutate(config)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(InputError, match=message):
        load_geometry(path)


def test_unreadable_inputs(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="invalid JSON"):
        load_geometry(bad)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no config.json"):
        load_geometry(tmp_path / "empty")
    with pytest.raises(InputError, match="no such file"):
        load_geometry(tmp_path / "missing.json")
    with pytest.raises(InputError, match="not a local checkpoint or config.json, not in the local Hugging Face cache, "
                       "and its config.json cannot be read from the hub \\(HF_HUB_OFFLINE is set"):
        load_geometry("someone/SomeModel")  # tests/unit/conftest.py: the hub is off


def test_truncated_safetensors_is_an_input_error(tmp_path):
    ckpt = make_checkpoint(tmp_path / "c", builtin_config(FLASH))
    (ckpt / "model.safetensors").write_bytes(b"\x01\x02")
    with pytest.raises(InputError, match="truncated safetensors"):
        load_geometry(ckpt)


def test_model_id_found_in_the_local_hf_cache(tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    repo = hub / "models--deepseek-ai--DeepSeek-V4-Flash"
    make_checkpoint(repo / "snapshots" / "abc123", builtin_config(FLASH), [{"model.layers.0.ffn.experts.1.w1.weight": 4096}])
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    g = load_geometry(FLASH)
    assert g.source == "hf-cache" and g.weights is not None and g.weights.expert_bytes == 4096
    assert g.config_path.endswith("snapshots/abc123/config.json")
    # Not cached: the built-in values, no weights.
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    assert load_geometry(FLASH).source == "builtin"


def test_cached_non_dsv4_id_is_rejected(tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    make_checkpoint(hub / "models--org--Other" / "snapshots" / "r1", {"model_type": "llama", "num_hidden_layers": 2})
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    with pytest.raises(InputError, match="not a DeepSeek-V4 model"):
        load_geometry("org/Other")


# -- layouts vLLM refuses, or that dsv4ctl does not model: refused, never planned ------------------------


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda c: c.update(head_dim=256), r"Unsupported head_dim for fused quant\+cache: 256"),
        (lambda c: c.update(index_head_dim=64), r"Unsupported head_dim for fused quant\+cache: 64"),
        (lambda c: c.update(head_dim=128), "models DeepSeek-V4's KV layout for head_dim 512 only"),
        (lambda c: c.update(index_head_dim=512), "for index_head_dim 128 only"),
        (lambda c: c.update(compress_ratios=[128 if r == 4 else r for r in c["compress_ratios"]]),
         "no layer with compression ratio 4"),
        # A DeepSeek-V4 layout labelled V4.1: read as V4.1, whose layers vLLM refuses for a ratio of 4.
        (lambda c: c.update(architectures=["DeepseekV41ForCausalLM"]), "DeepSeek V4.1 layer 2 has compress_ratio=4"),
        (lambda c: c.update(architectures=["DeepseekV41ForCausalLM"], model_type="deepseek_v41"),
         "only 0 \\(sliding window\\), 1 and 2 are supported"),
        (lambda c: c.update(architectures=["DeepseekV42ForCausalLM"]), "architecture DeepseekV42ForCausalLM is not planned"),
        (lambda c: c.update(architectures=["SomethingElseForCausalLM"]), "architecture SomethingElseForCausalLM is not planned"),
    ],
)
def test_unmodelled_layouts_are_refused(tmp_path, mutate, message):
    config = builtin_config(FLASH)
    mutate(config)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(InputError, match=message):
        load_geometry(path)


def test_unmodelled_layout_is_one_line_and_exit_1(cli, tmp_path):
    config = builtin_config(FLASH)
    config["architectures"] = ["DeepseekV42ForCausalLM"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = cli("fit-length", str(path), "--kv-cache-memory", "10GiB")
    assert result.exit_code == 1
    assert "DeepseekV42ForCausalLM" in result.stderr and "Traceback" not in result.output
    assert result.stdout == ""

