"""CRC-32 of files, computed in chunks by several threads and ranks, then combined.

The checksum of a file is the standard CRC-32 of its bytes (``zlib.crc32``,
what ``python -c "import zlib; ..."``, ``crc32`` or 7-Zip print), written as
8 hex digits. To spread the work, a file is cut into chunks of
:data:`CHUNK_BYTES`; each chunk's CRC is computed separately (``zlib.crc32``
releases the GIL, so threads run in parallel, and different ranks can take
different chunks) and the CRCs are joined with :func:`crc32_combine`
(zlib's algorithm, which Python's ``zlib`` module does not expose).
"""

import os
import zlib
from concurrent.futures import ThreadPoolExecutor

from ..exceptions import DataFileError

__all__ = ["CHUNK_BYTES", "crc32_combine", "chunk_items", "crc32_of_items", "crc32_of_range",
           "crc32_of_file", "combine_items", "format_crc", "io_threads"]

CHUNK_BYTES = 64 << 20
_BUFFER_BYTES = 8 << 20
_POLY = 0xEDB88320


def _multmodp(a, b):
    """``a * b`` modulo the CRC-32 polynomial (reflected bit order)."""
    m = 1 << 31
    p = 0
    while True:
        if a & m:
            p ^= b
            if (a & (m - 1)) == 0:
                break
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
    return p


_X2N = [1 << 30]  # x^(2^k) modulo the polynomial, k = 0..31
for _ in range(31):
    _X2N.append(_multmodp(_X2N[-1], _X2N[-1]))


def _x2nmodp(n, k):
    """``x^(n * 2^k)`` modulo the polynomial."""
    p = 1 << 31
    while n:
        if n & 1:
            p = _multmodp(_X2N[k & 31], p)
        n >>= 1
        k += 1
    return p


def crc32_combine(crc1, crc2, length2):
    """The CRC-32 of ``A + B`` from ``crc32(A)``, ``crc32(B)`` and ``len(B)``."""
    if length2 <= 0:
        return crc1
    return _multmodp(_x2nmodp(length2, 3), crc1) ^ crc2


def format_crc(crc):
    """``0x1a2b3c4d`` as ``"1a2b3c4d"``."""
    return f"{crc & 0xFFFFFFFF:08x}"


def chunk_items(files):
    """``[(name, offset, length), ...]`` covering ``files`` (``{name: size}``) in chunks."""
    items = []
    for name, size in files.items():
        offsets = range(0, size, CHUNK_BYTES) if size else [0]
        items.extend((name, offset, min(CHUNK_BYTES, size - offset)) for offset in offsets)
    return items


def crc32_of_range(path, offset, length):
    """The CRC-32 of ``length`` bytes of the file ``path`` from ``offset``."""
    crc = 0
    buffer = bytearray(min(_BUFFER_BYTES, max(length, 1)))
    view = memoryview(buffer)
    fd = os.open(path, os.O_RDONLY)
    try:
        done = 0
        while done < length:
            count = os.preadv(fd, [view[:min(len(buffer), length - done)]], offset + done)
            if count == 0:
                raise DataFileError(f"{path} ended at byte {offset + done}, expected "
                                    f"{offset + length} bytes")
            crc = zlib.crc32(view[:count], crc)
            done += count
    finally:
        os.close(fd)
    return crc


def crc32_of_items(directory, items, threads=1):
    """The CRC of each ``(name, offset, length)`` chunk of files in ``directory``.

    Returns
    -------
    list of (name, offset, length, crc)
    """
    def one(item):
        name, offset, length = item
        return name, offset, length, crc32_of_range(os.path.join(directory, name), offset, length)

    if threads <= 1 or len(items) <= 1:
        return [one(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(threads, len(items))) as pool:
        return list(pool.map(one, items))


def crc32_of_file(path, size, regions):
    """The CRC-32 of a file whose data regions' CRCs are known already.

    Parameters
    ----------
    path : str
    size : int
        The file's size.
    regions : list of (offset, [(length, crc), ...])
        Byte ranges whose CRCs were computed from the bytes written there
        (in pieces); the bytes between them (HDF5's metadata) are read from
        the file.

    Returns
    -------
    int or None
        None when the regions overlap or pass the end of the file.
    """
    crc, position = 0, 0
    for offset, pieces in sorted(regions, key=lambda region: region[0]):
        if offset < position:
            return None
        crc = crc32_combine(crc, crc32_of_range(path, position, offset - position),
                            offset - position)
        for length, piece_crc in pieces:
            crc = crc32_combine(crc, piece_crc, length)
            offset += length
        position = offset
    if position > size:
        return None
    return crc32_combine(crc, crc32_of_range(path, position, size - position), size - position)


def combine_items(parts):
    """``{name: crc}`` of whole files from their chunk CRCs (any order, all chunks)."""
    by_file = {}
    for name, offset, length, crc in sorted(parts, key=lambda part: (part[0], part[1])):
        by_file.setdefault(name, []).append((offset, length, crc))
    result = {}
    for name, chunks in by_file.items():
        total = 0
        for _, length, crc in chunks:
            total = crc32_combine(total, crc, length)
        result[name] = total
    return result


def io_threads(local_size):
    """Threads for checksums on one rank: the cores of this node split among its ranks, 1-4."""
    affinity = getattr(os, "sched_getaffinity", None)
    cores = len(affinity(0)) if affinity else (os.cpu_count() or 1)
    return max(1, min(4, cores // max(1, local_size)))
