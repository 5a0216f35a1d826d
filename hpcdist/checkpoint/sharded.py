"""The sharded backend: every rank writes its own ``rank_NNNNN.h5``, rank 0 an ``index.h5``.

``rank_NNNNN.h5`` holds this rank's blocks (its Sharded blocks and its
stripes of large replicated arrays) as plain datasets named by their state
path. ``index.h5`` holds the small entries itself and stitches every other
entry into one global dataset with an HDF5 virtual dataset whose sources
are the rank files, named by relative paths (HDF5 looks for them next to
``index.h5``, so the step directory can be renamed or moved). Plain h5py,
``h5dump`` or any HDF5 reader sees the whole checkpoint through it.
"""

import os
import zlib
from concurrent.futures import ThreadPoolExecutor

import h5py
import numpy as np

from .._hdf5_blocks import blocks_of, write_block
from .checksum import chunk_items, crc32_of_file, crc32_of_items
from .commit import WriteBehind, fsync_file
from .leaf_datasets import create_leaf_dataset, describe_leaf
from .manifest import FORMAT, FORMAT_VERSION, leaf_dtype
from .plan import INDEX_FILE, rank_file
from .state import CONTAINER_KINDS

__all__ = ["write_sharded", "write_index", "finish_files", "describe_root"]


def describe_root(h5file, plan):
    """The root attributes of an ``index.h5``."""
    h5file.attrs["hpcdist_format"] = FORMAT
    h5file.attrs["hpcdist_format_version"] = FORMAT_VERSION
    h5file.attrs["hpcdist_step"] = plan.step
    h5file.attrs["hpcdist_world_size"] = plan.world_size
    h5file.attrs["hpcdist_backend"] = plan.backend


def write_index(directory, plan, writes_by_path):
    """Rank 0: ``index.h5`` with the inline entries and virtual datasets for the rest."""
    with h5py.File(os.path.join(directory, INDEX_FILE), "w") as h5file:
        describe_root(h5file, plan)
        for path in plan.order:
            entry = plan.entries[path]
            if entry["kind"] in CONTAINER_KINDS:
                h5file.require_group(path).attrs["hpcdist_kind"] = entry["kind"]
                continue
            storage = None if entry["kind"] == "none" else leaf_dtype(entry)[1]
            if path in plan.inline:
                dataset = create_leaf_dataset(h5file, path, entry, storage, entry.get("shape"))
                write = writes_by_path.get(path)
                if write is not None:
                    for block in blocks_of(write.source.shape, write.axis, storage.itemsize):
                        write_block(dataset, write.source, write.axis, 0, block)
                continue
            shape, axis = tuple(entry["shape"]), entry["axis"]
            layout = h5py.VirtualLayout(shape=shape, dtype=storage)
            for piece in entry["pieces"]:
                start, stop = piece["start"], piece["stop"]
                piece_shape = shape[:axis] + (stop - start,) + shape[axis + 1:]
                target = [slice(None)] * len(shape)
                target[axis] = slice(start, stop)
                layout[tuple(target)] = h5py.VirtualSource(piece["file"], piece["dataset"],
                                                           shape=piece_shape)
            describe_leaf(h5file.create_virtual_dataset(path, layout), entry)


def finish_files(directory, names, threads, items=None):
    """fsync ``names`` while computing CRCs of their chunks (all, or ``items``).

    Returns
    -------
    dict
        ``{"files": {name: size}, "parts": [(name, offset, length, crc), ...]}``
    """
    sizes = {name: os.path.getsize(os.path.join(directory, name)) for name in names}
    if items is None:
        items = chunk_items(sizes)
    with ThreadPoolExecutor(max_workers=1) as syncer:
        synced = [syncer.submit(fsync_file, os.path.join(directory, name)) for name in names]
        parts = crc32_of_items(directory, items, threads)
        for future in synced:
            future.result()
    return {"files": sizes, "parts": parts}


def _write_rank_file(path, plan, writes, rank, checksums):
    """Write this rank's blocks, each block's CRC started in ``checksums`` (an
    executor) and its flush to disk started (:class:`WriteBehind`) as soon as
    it is in the file, so that summing and flushing overlap the writing.

    Returns
    -------
    list of (offset, [(nbytes, future CRC-32), ...]) or None
        Each dataset's byte offset in the file with its blocks' CRCs (of the
        memory that was written there, in file order); None when some
        dataset's storage is not one contiguous range as expected (the
        caller then reads the file back).
    """
    regions = []
    with h5py.File(path, "w") as h5file, WriteBehind(path) as behind:
        h5file.attrs["hpcdist_rank"] = rank
        h5file.attrs["hpcdist_step"] = plan.step
        for write in writes:
            if write.path in plan.inline:
                continue
            source = write.source
            dataset = h5file.create_dataset(write.path, shape=source.shape, dtype=source.dtype,
                                            fill_time="never")
            blocks = []
            for block in blocks_of(source.shape, 0, source.dtype.itemsize):
                write_block(dataset, source, 0, 0, block)
                behind.written()
                written = source[block[0]:block[1]].reshape(-1).view(np.uint8)
                blocks.append((written.nbytes, checksums.submit(zlib.crc32, written)))
            offset = dataset.id.get_offset()
            if offset is None or dataset.id.get_storage_size() != source.nbytes:
                regions = None
            elif regions is not None:
                regions.append((offset, blocks))
    return regions


def write_sharded(directory, plan, writes, rank, threads):
    """Write this rank's file (and, on rank 0, ``index.h5``); fsync; CRCs.

    The CRC of this rank's file is computed while the file is written and
    flushed (the CPU sums while the disk writes): the data blocks' CRCs from
    the memory that was written (in ``threads`` threads, each block as soon
    as it is written, no read-back), the bytes between them (HDF5's
    metadata) read from the file, all joined with
    :func:`~hpcdist.checkpoint.checksum.crc32_combine`.

    Parameters
    ----------
    directory : str
        The step's temporary directory.
    plan : Plan
    writes : list of Write
        This rank's blocks (:func:`~hpcdist.checkpoint.plan.local_writes`).
    rank : int
    threads : int
        Threads for the checksums.

    Returns
    -------
    dict
        ``{"files": {name: size}, "parts": [(name, offset, length, crc)]}``
        (one part per file: its whole CRC).
    """
    name = rank_file(rank)
    path = os.path.join(directory, name)
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool, \
            ThreadPoolExecutor(max_workers=1) as syncer:
        index = None
        if rank == 0:  # small: written first, its fsync and CRC overlap the rank file's writing
            write_index(directory, plan, {write.path: write for write in writes})
            index = syncer.submit(finish_files, directory, [INDEX_FILE], 1)
        regions = _write_rank_file(path, plan, writes, rank, pool)
        synced = syncer.submit(fsync_file, path)  # the disk works while the CPU sums
        size = os.path.getsize(path)
        crc = None
        if regions is not None:
            crc = crc32_of_file(path, size, [(offset, [(length, future.result())
                                                       for length, future in pieces])
                                             for offset, pieces in regions])
        synced.result()
        index = None if index is None else index.result()
    if crc is None:  # unexpected layout: read the file back
        report = finish_files(directory, [name], threads)
    else:
        report = {"files": {name: size}, "parts": [(name, 0, size, crc)]}
    if index is not None:
        report["files"].update(index["files"])
        report["parts"].extend(index["parts"])
    return report
