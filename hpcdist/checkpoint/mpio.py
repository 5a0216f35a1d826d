"""The mpio backend: one shared ``index.h5`` written collectively with parallel HDF5.

Every rank opens ``index.h5`` with ``driver="mpio"`` and creates every group
and dataset (global shapes) in the same order, as parallel HDF5 requires.
An entry with blocks from several ranks (a Sharded array, a striped
replicated array) is written with collective MPI-IO calls; every rank makes
the same number of calls, a rank with nothing (left) to write selects
nothing. An entry written by one rank only (small entries: rank 0) is
written independently. The file's CRC is computed in chunks spread over the
ranks and combined on rank 0.

Needs h5py built against parallel HDF5 (``h5py.get_config().mpi``).
"""

import os

import h5py

from .._hdf5_blocks import blocks_of, collective_dxpl, write_block, write_empty
from .checksum import chunk_items
from .commit import WriteBehind
from .leaf_datasets import create_leaf_dataset
from .manifest import leaf_dtype
from .plan import INDEX_FILE, balanced_range
from .sharded import describe_root, finish_files
from .state import CONTAINER_KINDS

__all__ = ["write_mpio"]


def _rounds(entry, contributions, itemsize):
    """The number of collective write calls of an entry: its largest block count."""
    shape, axis = entry["shape"], entry["axis"]
    counts = []
    for _, start, stop in contributions:
        block_shape = shape[:axis] + [stop - start] + shape[axis + 1:]
        counts.append(len(blocks_of(block_shape, axis, itemsize)))
    return max(counts)


def write_mpio(directory, plan, writes, rank, size, comm, threads):
    """Write ``index.h5`` collectively on ``comm``; fsync (rank 0); CRCs of this rank's chunks.

    Every rank of ``comm`` must call this with the same plan.

    Returns
    -------
    dict
        ``{"files": {"index.h5": size}, "parts": [...]}`` (the parts this
        rank computed).
    """
    by_path = {write.path: write for write in writes}
    dxpl = collective_dxpl()
    path = os.path.join(directory, INDEX_FILE)
    with h5py.File(path, "w", driver="mpio", comm=comm) as h5file, \
            WriteBehind(path if rank == 0 else None) as behind:  # rank 0 flushes the shared file
        describe_root(h5file, plan)
        datasets = {}
        for name in plan.order:
            entry = plan.entries[name]
            if entry["kind"] in CONTAINER_KINDS:
                h5file.require_group(name).attrs["hpcdist_kind"] = entry["kind"]
                continue
            storage = None if entry["kind"] == "none" else leaf_dtype(entry)[1]
            datasets[name] = (create_leaf_dataset(h5file, name, entry, storage,
                                                  entry.get("shape")), storage)
        for name in plan.leaves():
            contributions = plan.contributions[name]
            if not contributions:
                continue
            dataset, storage = datasets[name]
            write = by_path.get(name)
            mine = [] if write is None else blocks_of(write.source.shape, write.axis,
                                                      storage.itemsize)
            if len(contributions) == 1:  # one writer: independent I/O, nobody waits
                for block in mine:
                    write_block(dataset, write.source, write.axis, write.start or 0, block)
                    behind.written()
                continue
            for round_ in range(_rounds(plan.entries[name], contributions, storage.itemsize)):
                if round_ < len(mine):
                    write_block(dataset, write.source, write.axis, write.start, mine[round_],
                                dxpl=dxpl)
                else:
                    write_empty(dataset, dxpl)
                behind.written()
    items = chunk_items({INDEX_FILE: os.path.getsize(path)})
    start, stop = balanced_range(len(items), size, rank)
    report = finish_files(directory, [INDEX_FILE] if rank == 0 else [], threads,
                          items=items[start:stop])
    report["files"] = {INDEX_FILE: os.path.getsize(path)}
    return report
