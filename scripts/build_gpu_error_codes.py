#!/usr/bin/env python3
"""Builds dsv4ctl/catalogue/gpu_error_codes.json: the CUDA runtime, CUDA driver and HIP error codes, with the
names, texts and doc comments of the packages that define them, so that an answer naming "CUDA error 803" says
what NVIDIA's own headers and runtime say about 803 and nothing typed by hand.

    python scripts/build_gpu_error_codes.py                  # downloads into /work/wheels/gpu-errors what is missing
    python scripts/build_gpu_error_codes.py --wheels DIR     # another download/unpack folder
    python scripts/build_gpu_error_codes.py --check          # fails if the committed JSON differs from a rebuild

Sources (each a PyPI wheel, `pip download NAME==VERSION --no-deps`; nothing is installed)
- CUDA runtime, `enum cudaError` (the cudaError_t codes) in include/driver_types.h of nvidia-cuda-runtime
  (CUDA 13.0) and nvidia-cuda-runtime-cu12 (CUDA 12.8); logs come from both. A row is the newest release's
  that has the code and cites that header; `in` lists the releases that have it when not all do, and `older`
  keeps an older release's name/text where it differs (at these two releases neither happens for the runtime:
  both have the same 134 codes, names and texts). `text` is what the runtime itself prints for the code:
  `cudaGetErrorString(code)` of the wheel's libcudart, called through ctypes. It is a table lookup inside
  libcudart and needs no GPU and no driver (this builds on machines without libcuda). `cudaGetErrorName`
  is called as well and must give back the header's name, which checks the parser against the library.
- CUDA driver, `enum cudaError_enum` (CUresult, the CUDA_ERROR_* names) in include/cuda.h of the same
  wheels. The driver's texts come from cuGetErrorString in libcuda.so, which ships with the display driver
  and in no wheel, so driver rows have names, values and doc comments but no `text`.
- HIP (AMD ROCm), `enum hipError_t` in hip/hip_runtime_api.h, as Triton's PyPI wheel carries it for its AMD
  backend (triton/backends/amd/include/hip/, HIP 7.1 per hip_version.h there): explicit values and `///<` doc
  comments. Its names are exactly those of hip-python==7.2.2.562.43's hipError_t (80 with aliases). hipGetErrorString's texts live in
  libamdhip64 (ROCm's clr sources), which no PyPI package ships as data, so HIP rows have no `text`.
  (hip-python ships the same enum as a Python IntEnum whose docstring repeats the header's comments, but
  its values exist only in the compiled extension; the header is the better citation.)

Enum parsing is a small tokenizer over the enum body, not a C preprocessor: `/** ... */` documents the next
enumerator, `///<` and `/**< */` the previous one, other comments are skipped, a value is an integer literal,
an earlier enumerator, or implicit (previous + 1, as C does: hipErrorTbd). A `#if` inside a body, or any token
the parser does not expect, stops the build rather than guess.

Output: JSON, indented, keys sorted, so two runs give identical bytes.
    {"schema": 1,
     "cuda_runtime": {"source": "<pkg==ver> <file>", "sources": [...], "text_source": "...",
                      "codes": {"803": {"name", "text", "doc", "line", "deprecated", "driver",
                                        ["source", "in", "older"]}}},
     "cuda_driver":  {"source": ..., "codes": {"803": {"name", "doc", "line", "deprecated", ["aliases", "in"]}}},
     "hip":          {"source": ..., "codes": {"209": {"name", "doc", "line", "deprecated", "aliases"}}}}
Keys are sorted as strings (json's sort_keys). A row's `source` is present only where it is not the table's
`source` (a code only the older CUDA release has). `aliases` are further names with the same value (HIP's
deprecated hipErrorMemoryAllocation = 2, for example). `in` and `older`: see the CUDA runtime above.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "dsv4ctl" / "catalogue" / "gpu_error_codes.json"
DEFAULT_WHEELS = Path("/work/wheels/gpu-errors")
SCHEMA = 1


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    include: str  # folder of the headers inside the wheel
    libcudart: str | None = None  # path of libcudart inside the wheel

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"


CUDA13 = Package("nvidia-cuda-runtime", "13.0.96", "nvidia/cu13/include", "nvidia/cu13/lib/libcudart.so.13")
CUDA12 = Package("nvidia-cuda-runtime-cu12", "12.8.90", "nvidia/cuda_runtime/include",
                 "nvidia/cuda_runtime/lib/libcudart.so.12")
TRITON = Package("triton", "3.9.0", "triton/backends/amd/include")
CUDA_PACKAGES = (CUDA13, CUDA12)  # newest first: the first one that has a code gives its row


# ------------------------------------------------------------------------------------------- wheels
def wheel_path(wheels: Path, pkg: Package) -> Path:
    """The wheel of `pkg` in `wheels`, downloaded with pip when missing."""
    stem = pkg.name.replace("-", "_") + "-" + pkg.version + "-"
    found = sorted(p for p in wheels.glob("*.whl") if p.name.startswith(stem))
    if not found:
        wheels.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--disable-pip-version-check",
                        "-d", str(wheels), pkg.pin], check=True)
        found = sorted(p for p in wheels.glob("*.whl") if p.name.startswith(stem))
    if not found:
        raise SystemExit(f"pip download {pkg.pin} left no wheel named {stem}*.whl in {wheels}")
    return found[0]


def unpack(wheels: Path, pkg: Package, members: list[str]) -> Path:
    """Extract `members` (paths inside the wheel) into <wheels>/src/<name>-<version>/ and return that folder.
    Only what is read is extracted: Triton's wheel is ~290 MB and two of its headers are needed."""
    dest = wheels / "src" / f"{pkg.name}-{pkg.version}"
    missing = [m for m in members if not (dest / m).is_file()]
    if missing:
        with zipfile.ZipFile(wheel_path(wheels, pkg)) as z:
            for m in missing:
                z.extract(m, dest)
    return dest


# ------------------------------------------------------------------------------------- enum parser
@dataclass
class Enumerator:
    name: str
    value: int
    line: int  # 1-based line of the name in the header
    doc: str = ""  # the raw doc comment text (comment markers removed, lines joined)
    explicit: bool = True  # `= value` was written (False: previous + 1)


@dataclass
class _Pending:
    doc_lines: list[str] = field(default_factory=list)


_TOKEN = re.compile(r"""
    (?P<trail_block>/\*\*<(?P<tb>.*?)\*/)
  | (?P<doc_block>/\*\*(?!/)(?P<db>.*?)\*/)
  | (?P<block>/\*.*?\*/)
  | (?P<trail_line>///<(?P<tl>[^\n]*))
  | (?P<doc_line>///(?P<dl>[^\n]*))
  | (?P<line_comment>//[^\n]*)
  | (?P<pp>\#[^\n]*)
  | (?P<ident>[A-Za-z_]\w*)
  | (?P<number>(?:0[xX][0-9a-fA-F]+|\d+)[uUlL]*)
  | (?P<punct>[=,\-])
  | (?P<space>\s+)
""", re.S | re.X)


def _comment_text(raw: str) -> str:
    """The words of a comment body: leading '*' of each line dropped, lines joined by newlines."""
    lines = [re.sub(r"^\s*\*?\s?", "", ln).rstrip() for ln in raw.splitlines()]
    return "\n".join(ln for ln in lines).strip()


def parse_enum(text: str, opener: str) -> list[Enumerator]:
    """The enumerators of the enum whose head matches the regex `opener` (it must end just before `{`).

    Raises ValueError on anything outside the small C subset these headers use, so a header that changes
    shape breaks the build instead of yielding a wrong table."""
    m = re.search(opener + r"\s*\{", text)
    if not m:
        raise ValueError(f"no enum matching {opener!r}")
    start = m.end()
    end = text.index("}", start)
    # A '}' inside a comment would end the body early; no header here has one, and the tokenizer below would
    # then fail on the half comment, so this cannot go wrong silently.
    body = text[start:end]
    base_line = text.count("\n", 0, start) + 1

    out: list[Enumerator] = []
    pending = _Pending()
    expect = "name"  # name -> (= value | , | end) ; after value -> (, | end)
    cur: Enumerator | None = None
    last_trail: Enumerator | None = None  # the enumerator that `///<` lines continue
    pos = 0
    while pos < len(body):
        t = _TOKEN.match(body, pos)
        if not t:
            where = base_line + body.count("\n", 0, pos)
            raise ValueError(f"unexpected text at line {where}: {body[pos:pos + 40]!r}")
        kind, pos0, pos = t.lastgroup, t.start(), t.end()
        line = base_line + body.count("\n", 0, pos0)
        if kind in ("trail_line", "trail_block"):
            target = cur or last_trail or (out[-1] if out else None)
            if target is None:
                raise ValueError(f"trailing doc comment before any enumerator at line {line}")
            piece = _comment_text(t.group("tl") if kind == "trail_line" else t.group("tb"))
            target.doc = (target.doc + "\n" + piece).strip() if target.doc else piece
            last_trail = target
            continue
        if kind == "space":
            continue
        if kind in ("block", "line_comment"):
            last_trail = None
            continue
        if kind in ("doc_block", "doc_line"):
            last_trail = None
            pending.doc_lines.append(_comment_text(t.group("db") if kind == "doc_block" else t.group("dl")))
            continue
        if kind == "pp":
            raise ValueError(f"preprocessor line inside the enum at line {line}: {t.group(0)!r}")
        last_trail = None
        tok = t.group(0)
        if expect == "name":
            if tok == ",":  # `, cudaErrorApiFailureBase = 10000`: the comma put before the name
                continue
            if kind != "ident":
                raise ValueError(f"expected an enumerator name at line {line}, got {tok!r}")
            prev = out[-1].value if out else -1
            cur = Enumerator(tok, prev + 1, line, doc="\n".join(pending.doc_lines).strip(), explicit=False)
            pending = _Pending()
            out.append(cur)
            expect = "after_name"
        elif expect == "after_name":
            if tok == "=":
                expect = "value"
            elif tok == ",":
                expect = "name"
            else:
                raise ValueError(f"expected '=' or ',' after {cur.name} at line {line}, got {tok!r}")
        elif expect in ("value", "value_neg"):
            if tok == "-" and expect == "value":
                expect = "value_neg"
                continue
            sign = -1 if expect == "value_neg" else 1
            if kind == "number":
                cur.value = sign * int(tok.rstrip("uUlL"), 0)
            elif kind == "ident":
                ref = {e.name: e.value for e in out[:-1]}
                if tok not in ref:
                    raise ValueError(f"{cur.name} = {tok}: not an earlier enumerator (line {line})")
                cur.value = sign * ref[tok]
            else:
                raise ValueError(f"unsupported value for {cur.name} at line {line}: {tok!r}")
            cur.explicit = True
            expect = "after_value"
        elif expect == "after_value":
            if tok != ",":
                raise ValueError(f"expected ',' after the value of {cur.name} at line {line}, got {tok!r}")
            expect = "name"
            cur = None  # a `///<` after the comma still documents the enumerator before it (last in `out`)
    if expect in ("value", "value_neg"):
        raise ValueError("enum body ends inside a value")
    return out


# ---------------------------------------------------------------------------------------- doc text
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(`'\"])")


def short_doc(raw: str, sentences: int = 2) -> tuple[str, bool]:
    """(the first `sentences` sentences of a doc comment, as one line; whether it says \\deprecated).

    Doxygen markup is taken out: `::cudaEventQuery()` -> `cudaEventQuery()`, `\\p x` -> `x`, `\\deprecated`
    dropped (it becomes the flag)."""
    deprecated = bool(re.search(r"[\\@]deprecated\b", raw))
    s = re.sub(r"[\\@]deprecated\b", " ", raw)
    s = re.sub(r"[\\@](?:p|c|a|e|b|ref)\s+", "", s)
    s = re.sub(r"[\\@]\w+", " ", s)  # any other command (\note, \sa ...) as a word break
    s = re.sub(r"(?<![\w:])::(?=\w)", "", s)
    s = " ".join(s.split())
    if not s:
        return "", deprecated
    parts = _SENTENCE_END.split(s)
    return " ".join(parts[:sentences]).strip(), deprecated


# ----------------------------------------------------------------------------------- CUDA runtime
class Cudart:
    """cudaGetErrorString / cudaGetErrorName of one libcudart, loaded with ctypes (no GPU needed)."""

    def __init__(self, path: Path) -> None:
        self.lib = ctypes.CDLL(str(path))
        for fn in ("cudaGetErrorString", "cudaGetErrorName"):
            f = getattr(self.lib, fn)
            f.restype, f.argtypes = ctypes.c_char_p, [ctypes.c_int]

    def text(self, code: int) -> str:
        return self.lib.cudaGetErrorString(code).decode()

    def name(self, code: int) -> str:
        return self.lib.cudaGetErrorName(code).decode()


def _cite(pkg: Package, rel: str) -> str:
    return f"{pkg.pin} {pkg.include}/{rel}"


def _merge(tables: list[tuple[Package, str, dict[int, dict]]], compare: tuple[str, ...]) -> dict[int, dict]:
    """One table from per-release tables (newest first): each code's row from the newest release that has it
    (`source` set when that is not the newest), `in` when some release lacks the code, `older` with an older
    release's values of `compare` fields where they differ from the row's."""
    pins = [pkg.pin for pkg, _src, _t in tables]
    merged: dict[int, dict] = {}
    for i, (pkg, src, table) in enumerate(tables):
        for value, row in table.items():
            if value not in merged:
                merged[value] = dict(row, **({"source": src} if i else {}))
                continue
            diff = {k: row.get(k) for k in compare if row.get(k) != merged[value].get(k)}
            if diff:
                merged[value].setdefault("older", {})[pkg.pin] = diff
    for value, row in merged.items():
        have = [pin for pin, (_p, _s, t) in zip(pins, tables) if value in t]
        if len(have) != len(pins):
            row["in"] = have
    return merged


def _rows(enum: list[Enumerator], extra=None) -> dict[int, dict]:
    """Rows by value; a second name for a value becomes an alias of the first."""
    rows: dict[int, dict] = {}
    for e in enum:
        if e.value in rows:
            rows[e.value].setdefault("aliases", []).append(e.name)
            continue
        doc, deprecated = short_doc(e.doc)
        rows[e.value] = {"name": e.name, "doc": doc, "line": e.line, "deprecated": deprecated,
                         **(extra(e) if extra else {})}
    return rows


def build_cuda(wheels: Path) -> tuple[dict, dict]:
    runtime_tables, driver_tables, text_sources = [], [], []
    for pkg in CUDA_PACKAGES:
        root = unpack(wheels, pkg, [f"{pkg.include}/driver_types.h", f"{pkg.include}/cuda.h", pkg.libcudart])
        rt_src, drv_src = _cite(pkg, "driver_types.h"), _cite(pkg, "cuda.h")
        cudart = Cudart(root / pkg.libcudart)
        enum = parse_enum((root / pkg.include / "driver_types.h").read_text(),
                          r"enum\s+__device_builtin__\s+cudaError\b")
        for e in enum:
            lib_name = cudart.name(e.value)
            if lib_name != e.name:
                raise SystemExit(f"{rt_src}:{e.line}: header says {e.name} = {e.value}, libcudart says {lib_name}")
        runtime_tables.append((pkg, rt_src, _rows(enum, lambda e: {"text": cudart.text(e.value)})))
        drv = parse_enum((root / pkg.include / "cuda.h").read_text(), r"typedef\s+enum\s+cudaError_enum\b")
        driver_tables.append((pkg, drv_src, _rows(drv)))
        text_sources.append(f"{pkg.pin} {pkg.libcudart} cudaGetErrorString")
    runtime = _merge(runtime_tables, ("name", "text"))
    driver = _merge(driver_tables, ("name",))
    # The driver name with the same number, for the runtime rows. At these releases every number both enums
    # have is one error under two spellings (CUDA_ERROR_NO_BINARY_FOR_GPU = cudaErrorNoKernelImageForDevice =
    # 209; 14 pairs differ in more than case and underscores, all by renaming), so a CUresult in a log and a
    # cudaError_t of the same number are one error. Recheck this when the pins move.
    for value, row in runtime.items():
        if value in driver:
            row["driver"] = driver[value]["name"]
    runtime_table = {"source": runtime_tables[0][1], "sources": [t[1] for t in runtime_tables],
                     "text_source": text_sources[0], "text_sources": text_sources,
                     "codes": {str(k): runtime[k] for k in sorted(runtime)}}
    driver_table = {"source": driver_tables[0][1], "sources": [t[1] for t in driver_tables],
                    "text_note": "no text: cuGetErrorString lives in libcuda.so, which ships with the display "
                                 "driver and in no PyPI wheel",
                    "codes": {str(k): driver[k] for k in sorted(driver)}}
    return runtime_table, driver_table


# -------------------------------------------------------------------------------------------- HIP
def build_hip(wheels: Path) -> dict:
    pkg = TRITON
    header, version_h = f"{pkg.include}/hip/hip_runtime_api.h", f"{pkg.include}/hip/hip_version.h"
    root = unpack(wheels, pkg, [header, version_h])
    vt = (root / version_h).read_text()
    ver = ".".join(re.search(rf"#define\s+HIP_VERSION_{k}\s+(\d+)", vt).group(1) for k in ("MAJOR", "MINOR", "PATCH"))
    enum = parse_enum((root / header).read_text(), r"typedef\s+enum\s+(?:__HIP_NODISCARD\s+)?hipError_t\b")
    codes = _rows(enum)
    return {"source": _cite(pkg, "hip/hip_runtime_api.h"), "hip_version": ver,
            "text_note": "no text: hipGetErrorString's strings are compiled into libamdhip64 (ROCm clr), which "
                         "no PyPI package ships as data; `doc` is the header's comment",
            "codes": {str(k): codes[k] for k in sorted(codes)}}


# ------------------------------------------------------------------------------------ Ascend ACL codes
TORCH_NPU = Package("torch-npu", "2.14.0", "torch_npu/include/torch_npu/csrc/core/npu")


def build_acl(wheels: Path) -> dict:
    """torch_npu's table of ACL error codes and their texts (the text its checks end with, `[Error]: <text>`):
    `error_code_map` of NPUErrorCodes.h, each code with its first sentence (what failed) and the rest (what to check),
    read by the message index's own reader of that table (build_message_index.acl_error_codes)."""
    from build_message_index import acl_error_codes  # scripts/: one C-table reader for both files

    pkg = TORCH_NPU
    header = f"{pkg.include}/NPUErrorCodes.h"
    path = unpack(wheels, pkg, [header]) / header
    text = path.read_text()
    codes: dict[str, dict] = {}
    for code, body in acl_error_codes(path):
        lines = [" ".join(ln.split()) for ln in body.split("\n") if ln.strip()]
        row = re.search(r"\{\s*" + str(code) + r"\s*,", text)
        if not lines or row is None:
            continue
        codes[str(code)] = {"name": f"ACL {code}", "text": lines[0], "doc": " ".join(lines[1:]) or None,
                            "line": text.count("\n", 0, row.start()) + 1}
    return {"source": _cite(pkg, "NPUErrorCodes.h").replace(pkg.include + "/", "torch_npu/include/torch_npu/csrc/core/npu/"),
            "codes": dict(sorted(codes.items(), key=lambda kv: int(kv[0])))}


def build(wheels: Path) -> dict:
    runtime, driver = build_cuda(wheels)
    return {"schema": SCHEMA, "cuda_runtime": runtime, "cuda_driver": driver, "hip": build_hip(wheels),
            "acl": build_acl(wheels)}


def render(data: dict) -> str:
    return json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheels", type=Path, default=DEFAULT_WHEELS, help="download/unpack folder (default %(default)s)")
    ap.add_argument("--output", type=Path, default=OUTPUT)
    ap.add_argument("--check", action="store_true", help="compare with --output instead of writing it")
    args = ap.parse_args(argv)
    text = render(build(args.wheels))
    if args.check:
        same = args.output.is_file() and args.output.read_text() == text
        print(f"{args.output}: {'up to date' if same else 'DIFFERS from a rebuild'}")
        return 0 if same else 1
    args.output.write_text(text)
    d = json.loads(text)
    print(f"wrote {args.output} ({len(text.encode())} bytes): "
          + ", ".join(f"{k} {len(d[k]['codes'])} codes" for k in ("cuda_runtime", "cuda_driver", "hip", "acl")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
