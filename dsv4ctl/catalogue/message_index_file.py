"""The message index's packed file (message_index.bin): its layout, `pack` (for the generator) and `PackedIndex`
(for the loader), one definition for both.

Made for a lookup that opens the file cold, once per run: nothing is decoded or copied at opening but a 4 KB
header. Layout, little-endian, every section at a multiple of 4 bytes: a header struct (magic, schema, rows per
block, entries, then the byte lengths of the sections), then the sections:

- the JSON header (zlib): generator, packages and versions, counts, `fields`;
- the JSON `helpers` table (zlib; decoded at its first use, not at opening): the definitions vLLM's checks name;
- the anchor words, UTF-8, back to back (the first is "", the bucket of the entries without an anchor), and
  their offsets (uint32, one more than the words);
- a hash table of the words: `slots` (uint32, a power of two at least twice the words), slot
  `crc32(word) & (len - 1)` and the ones after it (linear probing) hold word index + 1, 0 where none is;
- the buckets as two uint32 arrays (word k finds ids[starts[k]:starts[k+1]]);
- the details' blocks, offsets (uint32) then the zlib blocks of `BLOCK_ROWS` JSON rows: per entry its `DETAILS`
  columns and its source rows' own checks as [[source index, check], ...]. A lookup matches on the rows alone
  and reads an entry's details only for the entry it returns;
- the blocks' offsets (uint32) and the body: the entries' JSON rows, less `DETAILS` and the sources' checks
  ([file, line, releases] each), in zlib blocks of `BLOCK_ROWS`.

`PackedIndex` reads the arrays in place (memoryview casts over the file's bytes or an mmap of it; copied only
on a big-endian machine), so opening costs the header and a lookup a few probes. Standard library only.
"""

from __future__ import annotations

import json
import struct
import sys
import zlib
from array import array
from typing import Any, Sequence

SCHEMA = 2  # the data's (the JSON source's `schema`): 2 added the entries' `check` and `later` and the `helpers` table
MAGIC = b"DSV4MIX\x03"  # the packing's: \x01 was a word list decoded whole at opening, \x02 had no helpers and details
BLOCK_ROWS = 16  # entries per zlib block: a lookup's candidates cost ~0.1 ms a block
DETAILS = ("check", "later")  # the columns kept apart from the rows a lookup matches on
# magic, schema, rows per block, entries, then the byte lengths of: header, helpers, words, word offsets, slots,
# starts, ids, detail offsets, details, block offsets
_HEAD = struct.Struct("<8sIIIIIIIIIIIII")


def _le(values: Sequence[int]) -> bytes:
    a = array("I", values)
    if sys.byteorder == "big":
        a.byteswap()
    return a.tobytes()


def _padded(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 4)


def pack(data: dict[str, Any]) -> bytes:
    """The packed file for the index `data` (the JSON source's document: its header keys, `fields`, `helpers`,
    `entries`).

    Byte-identical for the same data. The buckets are the entries' `anchor` words (space-separated; an entry
    without one goes to the bucket of the empty word, checked on every lookup); the rows keep their order."""
    rows = data["entries"]
    fields = list(data["fields"])
    a = fields.index("anchor")
    head = {k: v for k, v in data.items() if k not in ("entries", "helpers")}
    if head.get("schema") != SCHEMA:
        raise ValueError(f"schema {head.get('schema')!r}, expected {SCHEMA}")
    buckets: dict[str, list[int]] = {"": []}
    for i, row in enumerate(rows):
        words = row[a].split()
        for w in words:
            buckets.setdefault(w, []).append(i)
        if not words:
            buckets[""].append(i)
    words = sorted(buckets)
    encoded = [w.encode("utf-8") for w in words]
    word_offsets = [0]
    for w in encoded:
        word_offsets.append(word_offsets[-1] + len(w))
    size = 1 << max(4, (2 * len(words) - 1).bit_length())
    slots = [0] * size
    for k, w in enumerate(encoded):
        h = zlib.crc32(w) & (size - 1)
        while slots[h]:
            h = (h + 1) & (size - 1)
        slots[h] = k + 1
    starts, ids = [0], []
    for w in words:
        ids += buckets[w]
        starts.append(len(ids))
    src = fields.index("sources")
    kept = [i for i, f in enumerate(fields) if f not in DETAILS]
    apart = [fields.index(f) for f in DETAILS]
    main, details = [], []
    for row in rows:
        main.append([[s[:3] for s in row[i]] if i == src else row[i] for i in kept])
        details.append([row[i] for i in apart] + [[[k, s[3]] for k, s in enumerate(row[src]) if len(s) > 3]])
    blocks, offsets = _blocks(main)
    dblocks, doffsets = _blocks(details)
    sections = [
        _padded(zlib.compress(json.dumps(head, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode(), 9)),
        _padded(zlib.compress(json.dumps(data.get("helpers", {}), ensure_ascii=False, sort_keys=True,
                                         separators=(",", ":")).encode(), 9)),
        _padded(b"".join(encoded)), _le(word_offsets), _le(slots), _le(starts), _le(ids), _le(doffsets),
        _padded(b"".join(dblocks)), _le(offsets),
    ]
    return (_HEAD.pack(MAGIC, SCHEMA, BLOCK_ROWS, len(rows), *(len(x) for x in sections))
            + b"".join(sections) + b"".join(blocks))


def _blocks(rows: list[list]) -> tuple[list[bytes], list[int]]:
    """The rows in zlib blocks of BLOCK_ROWS JSON rows, and the blocks' offsets (one more than the blocks)."""
    blocks = [zlib.compress(json.dumps(rows[i:i + BLOCK_ROWS], ensure_ascii=False, separators=(",", ":")).encode(), 9)
              for i in range(0, len(rows), BLOCK_ROWS)]
    offsets = [0]
    for blk in blocks:
        offsets.append(offsets[-1] + len(blk))
    return blocks, offsets


def _uint32(view: memoryview) -> Sequence[int]:
    if sys.byteorder == "little":
        return view.cast("I")
    a = array("I")
    a.frombytes(view)
    a.byteswap()  # written little-endian
    return a


class PackedIndex:
    """A packed file's sections, read in place from `blob` (bytes or an mmap, kept alive by this object); ValueError
    when it is not one, of another schema or packing, or cut short."""

    def __init__(self, blob: bytes | Any) -> None:
        if len(blob) < _HEAD.size or bytes(blob[:8]) != MAGIC:
            raise ValueError("not a packed message index of this dsv4ctl (scripts/build_message_index.py --pack writes one)")
        _magic, schema, self.block_rows, self.count, *lengths = _HEAD.unpack_from(blob)
        if schema != SCHEMA:
            raise ValueError(f"schema {schema!r}, expected {SCHEMA}")
        view = memoryview(blob)
        parts, at = [], _HEAD.size
        for n in lengths:
            if n % 4 or at + n > len(view):
                raise ValueError("packed message index: inconsistent lengths")
            parts.append(view[at:at + n])
            at += n
        self.body = view[at:]
        head, self._helpers, self._words, word_offsets, slots, starts, ids, doffsets, self._details, offsets = parts
        self.header: dict[str, Any] = json.loads(zlib.decompress(head))
        self._helper_table: dict[str, list[list[str]]] | None = None
        self._word_offsets, self._slots = _uint32(word_offsets), _uint32(slots)
        self.starts, self.ids, self.offsets = _uint32(starts), _uint32(ids), _uint32(offsets)
        self._detail_offsets = _uint32(doffsets)
        self._mask = len(self._slots) - 1
        if (len(self.offsets) != -(-self.count // self.block_rows) + 1 or self.offsets[-1] != len(self.body)
                or len(self._detail_offsets) != len(self.offsets) or self._detail_offsets[-1] > len(self._details)
                or len(self.starts) != len(self._word_offsets) or self.starts[-1] != len(self.ids)
                or len(self._slots) & self._mask or self._word_offsets[-1] > len(self._words)):
            raise ValueError("packed message index: inconsistent lengths")

    def helpers(self) -> dict[str, list[list[str]]]:
        """The `helpers` table (name -> [[citation, source], ...]), decoded at the first call."""
        if self._helper_table is None:
            self._helper_table = json.loads(zlib.decompress(self._helpers))
        return self._helper_table

    @property
    def word_count(self) -> int:
        return len(self._word_offsets) - 1

    def word(self, k: int) -> str:
        return bytes(self._words[self._word_offsets[k]:self._word_offsets[k + 1]]).decode("utf-8")

    def bucket(self, word: str) -> Sequence[int]:
        """The entries the anchor word `word` finds (the empty word: those without an anchor), in file order."""
        w = word.encode("utf-8", "surrogatepass")
        slots, offsets, words, mask = self._slots, self._word_offsets, self._words, self._mask
        h = zlib.crc32(w) & mask
        for _ in range(len(slots)):
            k = slots[h]
            if not k:
                return ()
            k -= 1
            if offsets[k + 1] - offsets[k] == len(w) and words[offsets[k]:offsets[k + 1]] == w:
                return self.ids[self.starts[k]:self.starts[k + 1]]
            h = (h + 1) & mask
        return ()

    def block(self, b: int) -> list[list]:
        """The rows of block `b` (the columns of `fields` less DETAILS; sources as [file, line, releases])."""
        return json.loads(zlib.decompress(self.body[self.offsets[b]:self.offsets[b + 1]]))

    def details(self, b: int) -> list[list]:
        """The details of block `b`'s entries: their DETAILS columns, then [[source index, its check], ...]."""
        return json.loads(zlib.decompress(self._details[self._detail_offsets[b]:self._detail_offsets[b + 1]]))
