"""Compiled patterns kept between runs (dsv4ctl/re_cache.py): what comes back from the file is the pattern
`re.compile` makes (a pattern object compares equal to another only with the same text, flags and opcodes),
and any trouble with the file only means compiling again."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dsv4ctl import re_cache
from dsv4ctl.catalogue.signatures import CATALOGUE
from dsv4ctl.logs import prefilter, reader

pytestmark = pytest.mark.skipif(not re_cache._PRIVATE, reason="this interpreter has no re._parser/_compiler steps")

REPO = Path(__file__).resolve().parents[2]

# Every kind of pattern the code writes: flags, named and numbered groups, bytes, look-arounds, the big ones.
PATTERNS: list[tuple[str | bytes, int]] = [
    (r"(?P<level>INFO|ERROR)\s+(\d+)", 0),
    (r"out of memory", re.IGNORECASE),
    (r"^a.*b$", re.DOTALL | re.MULTILINE),
    (rb"non-default args: \{", 0),
    (r"(?<=x)y(?!z)", re.ASCII),
    (r"[\u00e9\u4e2d]+ (?i:caseless)", 0),
    (r"(?x) a  b  # verbose", 0),
    (prefilter._factored(prefilter.PATTERNS), re.ASCII),
    (prefilter._factored(prefilter.PATTERNS).encode(), 0),
    (reader._ANY_LAYER_RE.pattern, 0),
    *((p, 0) for sig in CATALOGUE for p in sig.patterns),
]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DSV4CTL_CACHE_DIR", str(tmp_path))
    re_cache.forget()
    yield tmp_path
    re_cache.forget()


def _from_file_only(monkeypatch) -> None:
    """Fail the test if a pattern is compiled instead of read from the file."""
    def refuse(*_args):
        raise AssertionError("compiled, not read from the cache")
    monkeypatch.setattr(re_cache, "_compile_and_keep", refuse)


def test_what_comes_back_from_the_file_is_what_re_compiles(cache, monkeypatch):
    first = [re_cache.compile(p, f) for p, f in PATTERNS]
    assert first == [re.compile(p, f) for p, f in PATTERNS]
    re_cache.save()
    assert re_cache.cache_file().exists()
    re_cache.forget()
    _from_file_only(monkeypatch)
    again = [re_cache.compile(p, f) for p, f in PATTERNS]
    for (p, f), rx in zip(PATTERNS, again):
        want = re.compile(p, f)
        assert rx == want, p  # the same text, flags and opcodes
        assert (rx.groups, rx.groupindex, rx.flags) == (want.groups, want.groupindex, want.flags)


def test_the_kept_patterns_find_what_re_finds(cache, monkeypatch):
    lines = (REPO / "tests" / "fixtures" / "logs").rglob("*.log")
    texts = [line for path in sorted(lines)[:40] for line in path.read_text(errors="replace").splitlines()[:200]]
    for p, f in PATTERNS:
        re_cache.compile(p, f)
    re_cache.save()
    re_cache.forget()
    _from_file_only(monkeypatch)
    for p, f in PATTERNS[:12]:
        rx, want = re_cache.compile(p, f), re.compile(p, f)
        for text in texts:
            subject = text.encode() if isinstance(p, bytes) else text
            a, b = rx.search(subject), want.search(subject)
            assert (a and (a.span(), a.groups())) == (b and (b.span(), b.groups()))


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage", "other_identity"])
def test_a_damaged_or_foreign_file_is_compiled_again(cache, damage):
    pattern = r"(?P<n>\d+) tokens"
    re_cache.compile(pattern)
    re_cache.save()
    path = re_cache.cache_file()
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
    elif damage == "truncate":
        data = data[: len(data) // 3]
    elif damage == "garbage":
        data = bytearray(os.urandom(64))
    else:
        import marshal
        import zlib

        payload = marshal.dumps(("another interpreter", {(pattern, 0): (0, b"\0\0\0\0", 0, {}, (None,))}))
        data = bytearray(zlib.crc32(payload).to_bytes(4, "little") + payload)
    path.write_bytes(bytes(data))
    re_cache.forget()
    assert re_cache.compile(pattern) == re.compile(pattern)
    assert re_cache.compile(pattern).match("12 tokens").group("n") == "12"


def test_wrong_opcodes_under_a_right_key_are_refused_and_compiled_again(cache):
    pattern = r"abc"
    kept = re_cache._load()
    kept[(pattern, 0)] = (32, b"\xff\xff\xff\xff" * 3, 0, {}, (None,))  # _sre refuses this list
    assert re_cache.compile(pattern) == re.compile(pattern)


def test_an_unwritable_cache_only_costs_the_compile(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("DSV4CTL_CACHE_DIR", str(blocker / "cache"))
    re_cache.forget()
    try:
        assert re_cache.compile(r"x+y") == re.compile(r"x+y")
        re_cache.save()  # no error
        assert not (blocker / "cache").exists()
    finally:
        re_cache.forget()


def test_re_errors_are_re_compiles(cache):
    with pytest.raises(re.error):
        re_cache.compile(r"(unclosed")
    with pytest.raises(ValueError):
        re_cache.compile(r"x", re.LOCALE)  # a str pattern cannot take LOCALE, as with re.compile


def test_only_the_process_that_loaded_the_file_writes_it(cache, monkeypatch):
    re_cache.compile(r"only (?:me)")
    monkeypatch.setattr(re_cache, "_owner", os.getpid() + 1)  # as in a forked scanner
    re_cache.save()
    assert not re_cache.cache_file().exists()


def test_the_file_holds_at_most_max_entries_this_runs_first(cache, monkeypatch):
    monkeypatch.setattr(re_cache, "MAX_ENTRIES", 3)
    for i in range(5):
        re_cache.compile(f"old{i}")
    re_cache.save()
    re_cache.forget()
    re_cache.compile("new0")
    re_cache.compile("new1")
    re_cache.save()
    re_cache.forget()
    kept = re_cache._load()
    assert len(kept) == 3
    assert ("new0", 0) in kept and ("new1", 0) in kept


def test_kept_results_are_keyed_by_the_source_of_the_function(cache, tmp_path):
    module = tmp_path / "derive_mod.py"
    calls = tmp_path / "calls"

    def write(body: str) -> None:
        module.write_text(
            "from dsv4ctl import re_cache\n"
            f"CALLS = {str(calls)!r}\n"
            "@re_cache.kept\n"
            "def derive(text):\n"
            "    open(CALLS, 'a').write('x')\n"
            f"    return {body}\n"
        )

    def load():
        spec = importlib.util.spec_from_file_location("derive_mod", module)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod

    write("(text.upper(), len(text))")
    assert load().derive("ab") == ("AB", 2)
    re_cache.save()
    re_cache.forget()
    assert load().derive("ab") == ("AB", 2)  # from the file: the function did not run again
    assert calls.read_text() == "x"
    write("(text.lower(), len(text))")  # an edited source is a new key
    re_cache.forget()
    assert load().derive("AB") == ("ab", 2)
    assert calls.read_text() == "xx"


def test_a_result_marshal_cannot_write_is_returned_and_not_kept(cache):
    @re_cache.kept
    def objects(n):
        return [object() for _ in range(n)]

    assert len(objects(2)) == 2
    assert not any(k[0] == "kept" for k in re_cache._load() if len(k) == 4)


def test_a_second_run_reads_every_pattern_from_the_file(tmp_path):
    """The CLI as run: the first diagnose writes the file at exit, the second compiles nothing."""
    env = {**os.environ, "DSV4CTL_CACHE_DIR": str(tmp_path), "NO_COLOR": "1"}
    log = REPO / "tests" / "fixtures" / "logs"
    sample = sorted(log.rglob("*.log"))[0]
    probe = (
        "import atexit, runpy, sys\n"
        "from dsv4ctl import re_cache\n"
        "compiled = []\n"
        "orig = re_cache._compile_and_keep\n"
        "re_cache._compile_and_keep = lambda *a: compiled.append(a[0]) or orig(*a)\n"
        # an exit handler: the process ends without the interpreter's finalization, after its exit handlers
        "atexit.register(lambda: sys.stderr.write(f'COMPILED {len(compiled)}\\n'))\n"
        f"sys.argv = ['dsv4ctl', 'diagnose', {str(sample)!r}]\n"
        "runpy.run_module('dsv4ctl', run_name='__main__')\n"
    )
    first = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, cwd=REPO)
    second = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, cwd=REPO)
    assert int(first.stderr.rsplit("COMPILED ", 1)[1]) > 50
    assert int(second.stderr.rsplit("COMPILED ", 1)[1]) == 0, second.stderr[-2000:]
