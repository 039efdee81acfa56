"""Derive steps of the value and file families (dsv4ctl/catalogue/families/values.py, files.py): the flag behind a
limit, the divisors that work, the nearest valid choice, which cache a path is and the variable that moves it."""

from __future__ import annotations

import posixpath
import re
import shlex
from typing import Any, Callable

from dsv4ctl.diagnosis.answers_common import arg, backend_on, flag_for, platform_of, serve_with
from dsv4ctl.logs.timeline import StartupTimeline

Details = dict[str, Any]


def _int(v: Any) -> int | None:
    try:
        return int(str(v).replace(",", ""))
    except (TypeError, ValueError):
        return None


def _clean(name: str | None) -> str:
    return (name or "").strip().strip("`'\" ")


def _over_limit(d: Details, tl: StartupTimeline) -> Details | None:
    value, limit = _int(d.get("value")), _int(d.get("limit"))
    if value is None or limit is None:
        return None
    limit_name, what = _clean(d.get("limit_name")), _clean(d.get("what"))
    limit_flag = flag_for(limit_name, tl.vllm_version)
    what_flag = flag_for(what, tl.vllm_version)
    if limit_flag is None and what_flag is None:
        return None
    out: Details = {"limit_name": limit_name, "what": what}
    if limit_flag:
        key = limit_flag.lstrip("-").replace("-", "_")
        now = arg(tl, key)
        # The launch's own value where its flags are in the log; else the message's, which is what this start ran with.
        said = f"{limit_flag} {now}" if now is not None else f"{limit}, as the message says"
        out.update(limit_flag=limit_flag, limit_now=said)
        out["limit_sentence"] = f"{limit_flag} sets {limit_name} (this launch: {said})."
        cmd = serve_with(tl, {key: value})
        if cmd:
            out["serve_raise"] = cmd
    else:
        out["limit_sentence"] = f"{what_flag} sets {what}."
    out["what_hint"] = f" ({what_flag} {limit})" if what_flag else (" (an adapter of rank ≤ %d)" % limit if "rank" in what.lower() else "")
    return out


def _under_minimum(d: Details, tl: StartupTimeline) -> Details | None:
    value, limit = _int(d.get("value")), _int(d.get("limit"))
    what_flag = flag_for(d.get("what"), tl.vllm_version)
    if value is None or limit is None or what_flag is None:
        return None
    out: Details = {"what_flag": what_flag, "limit_sentence": f"{what_flag} sets {d.get('what')}."}
    limit_flag = flag_for(d.get("limit_name"), tl.vllm_version)
    if limit_flag:
        out["limit_flag"] = limit_flag
    cmd = serve_with(tl, {what_flag.lstrip("-").replace("-", "_"): limit})
    if cmd:
        out["serve_raise_what"] = cmd
    return out


def _divisors(n: int, top: int = 64) -> list[int]:
    return [k for k in range(1, min(n, top) + 1) if n % k == 0]


def _sizes(values: list[int]) -> str:
    return ", ".join(str(v) for v in values[:10]) + (" …" if len(values) > 10 else "")


_PARALLEL = (("tensor parallel", "tensor_parallel_size"), ("tp_size", "tensor_parallel_size"), ("tp size", "tensor_parallel_size"),
             ("pipeline", "pipeline_parallel_size"), ("ep_size", "ep"), ("expert parallel", "ep"), ("ep rank", "ep"), ("world", "world"))


def _not_divisible(d: Details, tl: StartupTimeline) -> Details | None:
    a, b = _int(d.get("a")), _int(d.get("b"))
    if not a or not b:
        return None
    a_name, b_name = _clean(d.get("a_name")), _clean(d.get("b_name"))
    low = b_name.lower()
    out: Details = {"a_name": a_name, "b_name": b_name}
    tp = tl.tensor_parallel_size or _int(arg(tl, "tensor_parallel_size"))
    if "block" in low and ("quant" in low or low.startswith("block")):
        return _block_split(out, a, b, a_name, b_name, tp, tl)
    kind = next((k for word, k in _PARALLEL if word in low), None)
    if kind is None and "block" not in low:
        flag = flag_for(b_name, tl.vllm_version)
        if flag is None:
            return None
        ok = _divisors(a)
        out.update(divide_sentence=f"{a_name} ({a}) must split evenly into {b_name} ({b}) parts; {b} does not divide {a}.",
                   divide_action=f"Use a {flag} that divides {a}: {_sizes(ok)}")
        return out
    ok = [k for k in _divisors(a) if k > 1] or [1]
    if kind == "ep":
        extra = (-a) % b
        out["divide_sentence"] = (f"With expert parallelism each of the {b} ranks holds the same number of experts, so "
                                  f"{a} experts must divide by {b}. The EP size is --tensor-parallel-size × "
                                  "--data-parallel-size.")
        out["divide_action"] = f"Use an EP size (TP × DP) that divides {a}: {_sizes(ok)}"
        out["divide_action_2"] = (f"Or add {extra} redundant experts so that {a} + {extra} = {a + extra} divides by {b}: "
                                  f"--eplb-config '{{\"num_redundant_experts\": {extra}}}' (with --enable-eplb)")
        return out
    flag = {"tensor_parallel_size": "--tensor-parallel-size", "pipeline_parallel_size": "--pipeline-parallel-size"}.get(kind or "")
    out["divide_sentence"] = f"{a_name} ({a}) is split evenly across {b} ranks; {b} does not divide {a}."
    out["divide_action"] = f"Use {flag or 'a parallel size'} that divides {a}: {_sizes(ok)}"
    if flag and tl.model:
        good = [k for k in ok if k < b] or ok
        cmd = serve_with(tl, {kind: good[-1]})
        if cmd:
            out["divide_action_2"] = f"For example {flag} {good[-1]}: {cmd}"
    out["divide_action_3"] = "Use the other GPUs through --pipeline-parallel-size or --data-parallel-size"
    return out


def _block_split(out: Details, part: int, block: int, a_name: str, b_name: str, tp: int | None, tl: StartupTimeline) -> Details:
    """A per-GPU slice of a quantized weight that is not a whole number of quantization blocks."""
    if tp and tp > 1:
        full = part * tp
        works = [t for t in range(1, 65) if full % t == 0 and (full // t) % block == 0]
        out["divide_sentence"] = (
            f"FP8 block quantization stores weights in {block}-wide blocks, so every GPU's slice must be a whole number "
            f"of blocks. At --tensor-parallel-size {tp} the slice is {full} / {tp} = {part}, and {part} is not a multiple "
            f"of {block}. ({full} is {a_name} times {tp}: the layer's full size.)")
        out["divide_action"] = f"Use a --tensor-parallel-size that keeps whole blocks: {_sizes(works)} ({full} / TP a multiple of {block})"
        smaller = [t for t in works if t < tp]
        if smaller:
            t = smaller[-1]
            mult = tp // t if tp % t == 0 else None
            cmd = serve_with(tl, {"tensor_parallel_size": t, **({"pipeline_parallel_size": mult} if mult and mult > 1 else {})})
            out["divide_action_2"] = (f"For the same {tp} GPUs: --tensor-parallel-size {t}"
                                      + (f" --pipeline-parallel-size {mult}" if mult and mult > 1 else "")
                                      + (f" (or data parallelism): {cmd}" if cmd else " (or data parallelism)"))
    else:
        out["divide_sentence"] = (
            f"FP8 block quantization stores weights in {block}-wide blocks; the per-GPU slice {part} ({a_name}) is the "
            f"layer's size divided by the tensor-parallel size, and it is not a multiple of {block}.")
        out["divide_action"] = f"Use a smaller --tensor-parallel-size, so that the layer's size / TP is a multiple of {block}"
    if "gate" in a_name or "up" in a_name or "expert" in a_name.lower():
        out["divide_action_3"] = ("For a MoE layer, expert parallelism keeps each expert's weights whole: --enable-expert-parallel")
    else:
        out["divide_action_3"] = "Use the other GPUs through --pipeline-parallel-size or --data-parallel-size"
    return out


def _split_choices(text: str | None) -> list[str]:
    if not text:
        return []
    return [c for c in (p.strip().strip("'\"[]{}() ") for p in re.split(r"[,\s]+", text)) if c]


def _fold(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _model_family(choices: list[str], model: str | None) -> str | None:
    """The one name that the log's model names (its folded form inside the model's), the longest such; None when none or
    a tie: 'deepseek_v32' for deepseek-ai/DeepSeek-V3.2-Exp, where 'deepseek_v3' is a shorter match."""
    if not model:
        return None
    folded = _fold(model.rsplit("/", 1)[-1])
    hits = sorted((c for c in choices if len(_fold(c)) >= 4 and _fold(c) in folded), key=lambda c: -len(_fold(c)))
    if not hits or (len(hits) > 1 and len(_fold(hits[0])) == len(_fold(hits[1]))):
        return None
    return hits[0]


def _unknown_choice(d: Details, tl: StartupTimeline) -> Details | None:
    """A name the release does not know. What is offered comes from evidence only: the same name spelt as vLLM spells it,
    the name of the log's own model family, a release of vLLM that has the name (this build and whatever asked for it are
    from different releases); never a name picked by string distance, nor one of another platform."""
    value = _clean(d.get("value"))
    if not value:
        return None
    what = _clean(d.get("what")) or (d.get("flag") or "value")
    choices = _split_choices(d.get("choices"))
    registry = {"tool call parser": "tool_call_parser", "reasoning parser": "reasoning_parser", "tokenizer_mode": "tokenizer_mode",
                "quantization method": "quantization", "Invalid attention backend": "attention_backend",
                "attention backend": "attention_backend"}.get(what, (d.get("flag") or "").lstrip("-").replace("-", "_") or None)
    from dsv4ctl.catalogue import vllm_flags  # every release's flags: read by the answers that ask

    first, holding = None, []
    if registry:  # the flag table answers None / () for a name it does not hold, or when its file is broken
        choices = choices or list(vllm_flags.choices(registry, tl.vllm_version))
        first = vllm_flags.first_release(registry, value)
        if first:
            holding = [r for r in vllm_flags.releases() if vllm_flags.as_spelled(registry, value, r) is not None]
    platform = platform_of(" ".join(str(v) for v in d.values() if isinstance(v, str)))
    from_message = bool(_split_choices(d.get("choices")))
    resolved = vllm_flags.resolved_release(tl.vllm_version) if tl.vllm_version and registry else None
    release_known = resolved is not None and resolved.exact
    if not from_message and not release_known:
        # The release that refused it is not in the log: another release's names would be offered as this build's.
        choices = []
    offered = [c for c in choices if c != value and backend_on(c, platform)]
    out: Details = {"what": what.replace("Invalid ", ""), "value_q": f"'{value}'"}
    out["choice_sentence"] = (f"The launch asked for {out['what']} '{value}', which this vLLM build does not have: the "
                              "recipe, image or launcher that asked for it was written for another build (another "
                              "release, or a fork), or the name is mistyped.")
    if choices:
        out["choices_short"] = ", ".join(choices[:24]) + (" …" if len(choices) > 24 else "")
    same = next((c for c in offered if vllm_flags.same_name(c, value)), None)
    family = None if same else _model_family(offered, tl.model)
    pick = same or family
    if pick:
        out["nearest_q"] = f"'{pick}'"
        out["pick_reason"] = ("the same name as vLLM spells it" if same else
                              f"the name of this model's family (the log's model is {tl.model})")
        if registry:
            cmd = serve_with(tl, {registry: pick})
            if cmd:
                out["serve_choice"] = cmd
    if first and holding:
        span = holding[0] if len(holding) == 1 else f"{holding[0]}–{holding[-1]}"
        indexed = vllm_flags.releases()
        if indexed and holding[-1] == indexed[-1] and holding[0] == indexed[0]:
            # Every release indexed registers it, and this build refused it: a build where it was renamed or dropped.
            out["first_release_sentence"] = (
                f"'{value}' is registered in every vLLM release dsv4ctl indexed ({span}), and this build refused it: "
                "this build is one where it was renamed or dropped (a development build or a fork); its own names are "
                "in vllm serve --help=all, or run a release that registers it")
        else:
            running = f"this vLLM ({tl.vllm_version})" if tl.vllm_version else "the running vLLM"
            out["first_release_sentence"] = (
                f"'{value}' is a {out['what']} of vLLM {span} (of the releases dsv4ctl indexed), not of {running}: the "
                "recipe, image or launcher that asked for it and this vLLM build are from different releases; use the "
                "vLLM release it was written for, or the name this release has for it")
    elif not first:
        out["first_release_sentence"] = (
            f"No vLLM release dsv4ctl indexed has {out['what']} '{value}': the recipe or launcher is out of step with this "
            "image; bring the two to matching versions (update the recipe or pull the image it was written for)")
    return out


# Caches by a path's parts, with the variable that moves each (huggingface_hub==2.4.0 constants.py HF_HOME;
# vllm==0.32.0 vllm/envs.py VLLM_CACHE_ROOT; triton==3.9.0 knobs.py TRITON_CACHE_DIR; torch==2.13.0
# torch/_inductor/runtime/cache_dir_utils.py TORCHINDUCTOR_CACHE_DIR; numba NUMBA_CACHE_DIR; outlines OUTLINES_CACHE_DIR;
# flashinfer FLASHINFER_WORKSPACE_BASE; XDG_CACHE_HOME for the rest under ~/.cache).
_CACHES = (
    ("huggingface", "the Hugging Face cache (models, tokenizers)", "HF_HOME", "/tmp/hf"),
    (".triton", "Triton's kernel cache", "TRITON_CACHE_DIR", "/tmp/triton"),
    ("triton", "Triton's kernel cache", "TRITON_CACHE_DIR", "/tmp/triton"),
    ("torchinductor", "torch.compile's (Inductor's) cache", "TORCHINDUCTOR_CACHE_DIR", "/tmp/torchinductor"),
    ("vllm", "vLLM's cache (compiled graphs, model info)", "VLLM_CACHE_ROOT", "/tmp/vllm-cache"),
    ("numba", "Numba's cache", "NUMBA_CACHE_DIR", "/tmp/numba"),
    ("outlines", "Outlines' cache", "OUTLINES_CACHE_DIR", "/tmp/outlines"),
    ("flashinfer", "FlashInfer's JIT cache", "FLASHINFER_WORKSPACE_BASE", "/tmp/flashinfer"),
    (".cache", "the user's cache directory (~/.cache)", "XDG_CACHE_HOME", "/tmp/cache"),
)


def _cache(d: Details, tl: StartupTimeline) -> Details | None:
    path = _clean(d.get("path"))
    if not path:
        return None
    parts = path.lower()
    for word, name, var, example in _CACHES:
        if word in parts:
            break
    else:
        if path.startswith("/dev/"):
            return None  # a device node: the device families say more
        name, var, example = "a directory the server writes", None, None
    out: Details = {"cache_name": name, "parent": shlex.quote(posixpath.dirname(path.rstrip("/")) or "/")}
    if var:
        out.update(cache_var=var, cache_example=example)
    if path.startswith("/.cache") or path.startswith("/.triton") or path.startswith("/.config"):
        out["uid_sentence"] = ("The path starts at / because HOME is / : the container runs as a user with no home "
                               "directory (OpenShift's arbitrary user id, a securityContext runAsUser).")
        out["uid_action"] = ("Give that user a writable home, HOME=/tmp, or move every cache: HF_HOME, VLLM_CACHE_ROOT, "
                             "TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR, XDG_CACHE_HOME")
    else:
        out["uid_sentence"] = "The user the process runs as has no write permission there."
    return out


def _path_kind(path: str) -> tuple[str, str, str]:
    low = path.lower()
    if "adapter" in low or "lora" in low:
        return ("LoRA adapter", "An adapter is read from the path given in --lora-modules NAME=PATH (or a request's lora_path), "
                "on the node and in the container of the server; a Hub id is downloaded instead.",
                "Point --lora-modules at a directory that holds adapter_config.json and the adapter weights")
    if low.endswith((".jinja", ".j2")) or "template" in low:
        return ("Chat template", "--chat-template takes a file the API server process can read (or the template text itself).",
                "Give --chat-template a path that exists where the API server runs")
    if low.endswith(("config.json", ".safetensors", ".bin", "tokenizer.json", "tokenizer_config.json")) or "/models" in low or "snapshots" in low:
        return ("Model file", "The model directory (the positional model argument or --tokenizer) lacks this file, or is not mounted.",
                "Check the model directory is complete (config.json, tokenizer files, *.safetensors) and mounted at that path")
    if ".triton" in low or "torchinductor" in low or "/cache" in low or ".cache" in low:
        return ("Cache file", "A compile or download cache entry vanished while it was used: two processes sharing one cache "
                "directory, or a cache cleaned underneath.",
                "Give each server its own cache directory (TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR, VLLM_CACHE_ROOT), or clear it and restart")
    return ("Path", "", "Pass a path that exists on this node, or mount it into the container")


def _missing(d: Details, tl: StartupTimeline) -> Details | None:
    path = _clean(d.get("path"))
    if not path or path.startswith("/dev/"):
        return None
    kind, sentence, action = _path_kind(path if not d.get("kind_hint") else path + "/lora-adapter")
    if not path.startswith("/"):
        # A relative path resolves against the process's working directory; the message's own "Tried:" list says where
        # else it looked (the package's own folder, for a chat template).
        tried = f" It looked in: {d['tried']}." if d.get("tried") else ""
        sentence = (f"{path} is a relative path: it resolves against the working directory of the server process, which "
                    f"does not have it.{tried} A path such as examples/… of a recipe points into vLLM's source "
                    "repository, which the installed package does not include: download the file (or git clone the "
                    "repository) and pass its absolute path.")
    parent = posixpath.dirname(path.rstrip("/")) or "/"
    return {"path_kind": kind, "path_sentence": sentence, "path_action": action, "parent_q": shlex.quote(parent),
            "mount_action": ("In a container, the path must be inside a mounted volume: docker inspect -f '{{json .Mounts}}' "
                             "CONTAINER, or the pod's volumeMounts")}


def _flag_unknown(d: Details, tl: StartupTimeline) -> Details | None:
    flags = [t for t in (d.get("args") or "").split() if t.startswith("-")]
    if not flags:
        return None
    from dsv4ctl.catalogue import vllm_flags  # every release's flags: loaded by the answers that ask

    sentences, actions = [], []
    for flag in flags[:4]:
        name = flag.split("=", 1)[0]
        first = vllm_flags.first_release(name)  # the oldest indexed release that has the flag, if any does
        info = vllm_flags.flag(name, first) if first else None
        if info is not None and info.releases:
            sentences.append(f"{name} is a flag of vLLM {info.releases[0]}–{info.releases[-1]} only (of the releases indexed).")
            actions.append(f"Use a vLLM release that has {name} ({info.releases[0]}–{info.releases[-1]}), or drop it")
            continue
        # The same flag spelt another way ('_' for '-', another case) is the flag itself, not a guess; a flag picked
        # by string distance would be one.
        spelt = "--" + name.lstrip("-").replace("_", "-").lower()
        if spelt != name and vllm_flags.flag(spelt, tl.vllm_version) is not None:
            actions.append(f"{name} is spelt {spelt} in vLLM: use {spelt}")
        elif (worded := vllm_flags.flags_with_words(name, tl.vllm_version)):
            actions.append(f"Check the spelling: this release's flags with the words of {name} are {', '.join(worded)} "
                           "(vllm serve --help=all lists them all)")
        else:
            releases = vllm_flags.releases()
            span = f"{releases[0]}–{releases[-1]}" if releases else "dsv4ctl indexed"
            actions.append(f"Drop {name} or check its spelling in vllm serve --help=all: no vLLM release {span} has it")
    out: Details = {"unknown_flags": " ".join(flags[:4]), "flag_sentence": " ".join(sentences)}
    for key, action in zip(("flag_action", "flag_action_2"), actions):
        out[key] = action
    return out


DERIVE: dict[str, Callable[[Details, StartupTimeline], Details | None]] = {
    "value_over_limit": _over_limit,
    "value_under_minimum": _under_minimum,
    "value_not_divisible": _not_divisible,
    "value_unknown_choice": _unknown_choice,
    "flag_unknown": _flag_unknown,
    "cache_dir_not_writable": _cache,
    "path_not_found": _missing,
}
