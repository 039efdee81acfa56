"""The message index's packed file (message_index.bin): its layout, `pack` (for the generator) and `PackedIndex`
(for the loader), one definition for both.

Made for a lookup that opens the file cold, once per run: nothing is decoded or copied at opening but a 4 KB
header. Layout, little-endian, every section at a multiple of 4 bytes: a header struct (magic, schema, rows per
block, entries, then the byte lengths of the sections), then the sections:

- the JSON header (zlib): generator, packages and versions, counts, `fields`;
- the anchor words, UTF-8, back to back (the first is "", the bucket of the entries without an anchor), and
  their offsets (uint32, one more than the words);
- a hash table of the words: `slots` (uint32, a power of two at least twice the words), slot
  `crc32(word) & (len - 1)` and the ones after it (linear probing) hold word index + 1, 0 where none is;
- the buckets as two uint32 arrays (word k finds ids[starts[k]:starts[k+1]]);
- the blocks' offsets (uint32) and the body: the entries' JSON rows in zlib blocks of `BLOCK_ROWS`.

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

SCHEMA = 1  # the data's (the JSON source's `schema`)
MAGIC = b"DSV4MIX\x02"  # the packing's: \x01 was a word list decoded whole at opening
BLOCK_ROWS = 16  # entries per zlib block: a lookup's candidates cost ~0.1 ms a block
# magic, schema, rows per block, entries, then the byte lengths of: header, words, word offsets, slots, starts, ids,
# block offsets
_HEAD = struct.Struct("<8sIIIIIIIIII")


def _le(values: Sequence[int]) -> bytes:
    a = array("I", values)
    if sys.byteorder == "big":
        a.byteswap()
    return a.tobytes()


def _padded(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 4)


def pack(data: dict[str, Any]) -> bytes:
    """The packed file for the index `data` (the JSON source's document: its header keys, `fields`, `entries`).

    Byte-identical for the same data. The buckets are the entries' `anchor` words (space-separated; an entry
    without one goes to the bucket of the empty word, checked on every lookup); the rows keep their order."""
    rows = data["entries"]
    fields = list(data["fields"])
    a = fields.index("anchor")
    head = {k: v for k, v in data.items() if k != "entries"}
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
    blocks = [zlib.compress(json.dumps(rows[i:i + BLOCK_ROWS], ensure_ascii=False, separators=(",", ":")).encode(), 9)
              for i in range(0, len(rows), BLOCK_ROWS)]
    offsets = [0]
    for blk in blocks:
        offsets.append(offsets[-1] + len(blk))
    sections = [
        _padded(zlib.compress(json.dumps(head, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode(), 9)),
        _padded(b"".join(encoded)), _le(word_offsets), _le(slots), _le(starts), _le(ids), _le(offsets),
    ]
    return (_HEAD.pack(MAGIC, SCHEMA, BLOCK_ROWS, len(rows), *(len(x) for x in sections))
            + b"".join(sections) + b"".join(blocks))


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
        head, self._words, word_offsets, slots, starts, ids, offsets = parts
        self.header: dict[str, Any] = json.loads(zlib.decompress(head))
        self._word_offsets, self._slots = _uint32(word_offsets), _uint32(slots)
        self.starts, self.ids, self.offsets = _uint32(starts), _uint32(ids), _uint32(offsets)
        self._mask = len(self._slots) - 1
        if (len(self.offsets) != -(-self.count // self.block_rows) + 1 or self.offsets[-1] != len(self.body)
                or len(self.starts) != len(self._word_offsets) or self.starts[-1] != len(self.ids)
                or len(self._slots) & self._mask or self._word_offsets[-1] > len(self._words)):
            raise ValueError("packed message index: inconsistent lengths")

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
        """The rows of block `b`."""
        return json.loads(zlib.decompress(self.body[self.offsets[b]:self.offsets[b + 1]]))
