"""Packages and builds: a module that is not installed, a compiled extension built against another torch, a package
too old or too new, a toolchain the JIT compilers need (a C compiler, Python's headers, a ptxas that knows the GPU)."""

from __future__ import annotations

from dsv4ctl.catalogue.signature import Signature

FAMILIES: tuple[Signature, ...] = (
    Signature(
        id="deepgemm_unavailable",
        severity="critical",
        tier=1,
        title="DeepGEMM is not installed, or too old for this vLLM",
        meaning=(
            "This vLLM needs DeepGEMM's FP8 kernels (DeepSeek-V3.2/V4's sparse-attention indexer and FP8 block GEMMs) and "
            "found no usable deep_gemm package."
        ),
        patterns=(r"DeepGEMM backend is not available or outdated",),
        actions=(
            "Install the DeepGEMM revision this vLLM release pins (vLLM's own image ships it; tools/install_deepgemm.sh in "
            "vLLM's source), and check it imports: python -c 'import deep_gemm'",
            "For a model that does not need it, turn the DeepGEMM path off: VLLM_USE_DEEP_GEMM=0",
        ),
        source="vllm vllm/utils/deep_gemm.py (_missing); advice: xorbitsai/inference#4377, vllm-project/recipes#183, vllm-project/vllm#41849",
    ),
    Signature(
        id="extension_abi_mismatch",
        severity="critical",
        tier=1,
        title="{lib_name} was built against another torch/CUDA than the one installed",
        meaning=(
            "Loading {lib_name} failed on the undefined symbol {symbol_short}: a compiled extension refers to a function "
            "the installed torch (or CUDA, or CANN) does not have. It was built for another version."
        ),
        patterns=(
            r"(?P<lib>[\w/.+-]+\.so(?:\.[0-9]+)*): undefined symbol: (?P<symbol>\S+)",
            r"undefined symbol: (?P<symbol>\S+)",
        ),
        actions=(
            "Reinstall {package_hint} for the installed torch (pip show torch names it): a wheel built for that torch, or a "
            "build from source in this environment",
            "{vllm_c_action}",
            "Check which torch each side expects: python -c 'import torch; print(torch.__version__, torch.version.cuda)'",
        ),
        source="the dynamic loader's text; advice: vllm-project/vllm#9377, vllm-project/vllm-ascend#5710",
    ),
    Signature(
        id="shared_library_missing",
        severity="critical",
        tier=1,
        title="The loader cannot find {lib}",
        meaning=(
            "A compiled package needs {lib} and the dynamic loader found none: the package was built for another CUDA "
            "or driver stack than this image has (a .so.12 on a CUDA 13 image), or the library's directory is not on the "
            "loader's path."
        ),
        patterns=(r"(?P<lib>lib[\w.+-]+\.so(?:\.[0-9]+)*): cannot open shared object file",),
        actions=(
            "Install the build of that package made for this image's CUDA (the number after .so names the major version it wants)",
            "Check whether the library is anywhere on the node: ldconfig -p | grep {lib_base}",
        ),
        source="the dynamic loader's text (dlopen); advice: vllm-project/vllm#42511",
    ),
    Signature(
        id="module_not_installed",
        severity="critical",
        tier=1,
        title="Python module {module} is not installed in vLLM's environment",
        meaning="{module_sentence}",
        patterns=(r"No module named '(?P<module>[\w.]+)'",),
        actions=("{module_action}", "{module_action_2}"),
        source="Python's import system; advice: vllm-project/vllm#1814, LMCache/LMCache#1759, vllm-project/vllm#42511",
    ),
    Signature(
        id="numpy_abi",
        severity="critical",
        tier=1,
        title="A module compiled for NumPy 1.x was imported with NumPy 2",
        meaning="A compiled package in this environment predates NumPy 2's ABI, and NumPy 2 is installed.",
        patterns=(r"A module that was compiled using NumPy 1\.x cannot be run in\s+NumPy 2",
                  r"numpy\.core\.multiarray failed to import"),
        actions=("Install a NumPy 1.x beside it (or upgrade the package that was built for 1.x): pip install 'numpy<2'",),
        source="numpy's ABI check (numpy/core/_multiarray_umath); advice: the field's numpy2_abi reports",
    ),
    Signature(
        id="package_version_required",
        severity="critical",
        tier=1,
        title="{package} {have_text}is not the version this code needs ({need})",
        meaning="The code checks the installed {package} and needs {need}.",
        patterns=(
            r"requires (?:the )?`?(?P<package>[A-Za-z][\w.-]*)\s*(?P<need>[<>=!~]=?\s*[0-9][\w.]*)`?[^\n]*?"
            r"(?:but|found|you have|installed)[^0-9\n]*(?P<have>[0-9][\w.]*)",
            r"(?P<package>[A-Za-z][\w.-]*)(?:>=|==)(?P<need_v>[0-9][\w.]*) is required[^\n]*?(?:but found|, but|found) "
            r"(?:[A-Za-z][\w.-]*[= ]+)?(?P<have>[0-9][\w.]*)",
        ),
        actions=("Install the version it asks for: pip install '{package}{need_spec}'",
                 "Check what is installed: pip show {package}"),
        source="the version checks of vLLM, transformers (utils/versions.py require_version) and their dependencies",
    ),
    Signature(
        id="jit_toolchain_missing",
        severity="critical",
        tier=1,
        title="A JIT compiler's toolchain is missing in the image ({tool_text})",
        meaning="{tool_meaning}",
        patterns=(
            r"(?P<tool_text>Failed to find C compiler)",  # triton runtime/build.py
            r"(?P<tool_text>Python\.h: No such file or directory)",
            r"ptxas fatal\s*: Value '(?P<arch>sm_[0-9]+a?)' is not defined for option 'gpu-name'",
            r"(?P<tool_text>NVCC version should be >= (?P<nvcc_need>[0-9.]+))",
        ),
        actions=("{tool_action}", "{tool_action_2}"),
        source=(
            "triton==3.9.0 triton/runtime/build.py (C compiler, Python.h), triton backends/nvidia/compiler.py (ptxas); "
            "DeepGEMM csrc/jit/compiler.hpp (nvcc); advice: triton-lang/triton#8539, sgl-project/sglang#18644, "
            "vllm-project/vllm#49051"
        ),
    ),
    Signature(
        id="remote_code_needs_packages",
        severity="critical",
        tier=1,
        title="The model's own code needs packages this environment lacks: {packages}",
        meaning="The repository's modeling code (trust_remote_code) imports {packages}, which are not installed where vLLM runs.",
        patterns=(r"requires the following packages that were not found in your environment: (?P<packages>[\w.,\s-]+?)\.? Run",
                  r"requires the following packages that were not found in your environment: (?P<packages>[\w.,\s-]+)"),
        actions=("Install them into vLLM's environment (the image): python -m pip install {pip_args}",),
        source="transformers==5.19.0 transformers/dynamic_module_utils.py:259 (check_imports)",
    ),
    Signature(
        id="vllm_ops_not_loaded",
        severity="critical",
        tier=1,
        title="vLLM's compiled operators are not loaded ({op} is missing)",
        meaning=(
            "torch.ops.{namespace} has no {op}: vLLM's compiled extension ({namespace}) did not load. vLLM logs why "
            "earlier as a warning (Failed to import from vllm.{namespace} …): almost always an undefined symbol, i.e. the "
            "installed torch is not the one this vLLM was built for."
        ),
        patterns=(r"'_OpNamespace' '(?P<namespace>_C\w*)' object has no attribute '(?P<op>\w+)'",),
        actions=("Check that the extension loads: python -c 'import vllm._C'",
                 "Reinstall this vLLM with the torch it pins, and never upgrade torch alone under vLLM: pip install "
                 "--force-reinstall \"vllm==$(pip show vllm | sed -n 's/^Version: //p')\""),
        source="torch._ops._OpNamespace.__getattr__ (torch==2.13.0 torch/_ops.py); vllm _custom_ops.py (the import warning)",
    ),
)
