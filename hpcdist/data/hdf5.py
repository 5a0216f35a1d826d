"""HDF5 input and output of distributed arrays: every rank reads or writes only its block.

:func:`load_hdf5` reads this rank's balanced block of a dataset as a
hyperslab (no rank reads the whole dataset); :func:`save_hdf5` writes the
concatenation of every rank's block, with parallel HDF5 when h5py has it
and else as one file per rank stitched together by a virtual dataset.
Both are collective: every rank calls them, and an error on one rank (a
missing file, a bad shape) is raised on every rank.
"""

import numbers
import os

import h5py
import numpy as np

from .._arrays import to_host
from .._checks import check_writable_file, path_of
from .._hdf5_blocks import blocks_of, collective_dxpl, h5py_is_parallel, write_block, write_empty
from ..comm import allgather_object, resolve_context
from ..comm.agreement import agree_config
from ..comm.checks import format_ranks, raise_on_every_rank, validated_on_every_rank
from ..exceptions import (
    ConfigMismatchError,
    DataFileError,
    DataFileNotFoundError,
    HpcdistError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    MissingDatasetError,
)
from .partition import DataPartitioner

__all__ = ["load_hdf5", "save_hdf5"]

_SHARED_ERRORS = (ValueError, TypeError, KeyError, OSError, HpcdistError)
_LISTED = 20  # names shown in a "what exists" message


def _validated(ctx):
    return validated_on_every_rank(ctx, errors=_SHARED_ERRORS)


def _check_axis(axis, ndim, what):
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, numbers.Integral):
        raise InvalidArgumentTypeError(f"{what}: axis={axis!r} should be an int")
    if ndim == 0:
        raise InvalidArgumentError(
            f"{what}: a 0-d dataset cannot be split over ranks; read it with h5py")
    if not -ndim <= axis < ndim:
        raise InvalidArgumentError(f"{what}: axis={axis} is out of range for {ndim} dimensions")
    return int(axis) % ndim


def _check_name(dataset, what):
    if not isinstance(dataset, str) or not dataset.strip("/"):
        raise InvalidArgumentTypeError(
            f"{what}: dataset={dataset!r} should be a non-empty str such as 'X' or "
            "'group/X'")
    return dataset


def _datasets_in(h5file):
    names = []
    h5file.visititems(lambda name, obj: names.append(name)
                      if isinstance(obj, h5py.Dataset) else None)
    return names


def _listing(names):
    shown = ", ".join(repr(name) for name in names[:_LISTED])
    more = f" and {len(names) - _LISTED} more" if len(names) > _LISTED else ""
    return (shown + more) if names else "nothing"


def load_hdf5(path, dataset, *, ctx=None, axis=0):
    """This rank's balanced block of an HDF5 dataset, read as a hyperslab.

    Collective: every rank calls it. Rank ``r`` reads the elements
    ``DataPartitioner(n, size).get_partition(r)`` along ``axis`` (``n`` the
    dataset's length there) and nothing else.

    Parameters
    ----------
    path : str or path-like
        An HDF5 file every rank can read (virtual datasets, such as those
        :func:`save_hdf5` and checkpoints write, work too).
    dataset : str
        The dataset's name in the file, e.g. ``"X"`` or ``"train/X"``.
    ctx : Context, optional
        Default: the default context.
    axis : int, default=0
        The axis to split along.

    Returns
    -------
    ndarray of shape (..., n_local, ...)
        This rank's block (NumPy, the dataset's dtype); empty when there
        are more ranks than elements along ``axis``.

    Raises
    ------
    hpcdist.ConfigMismatchError
        ``dataset`` or ``axis`` differs across ranks (on every rank).
    hpcdist.DataFileNotFoundError
        No file at ``path`` (the message lists the HDF5 files next to it); a
        ``FileNotFoundError``.
    hpcdist.DataFileError
        ``path`` is not an HDF5 file (an ``OSError``).
    hpcdist.MissingDatasetError
        No dataset of that name (the message lists those in the file); a ``KeyError``.
    ValueError, TypeError
        A bad ``axis`` or ``dataset``.

    Examples
    --------
    >>> X_local = load_hdf5("train.h5", "X")        # doctest: +SKIP
    """
    ctx = resolve_context(ctx)
    # another dataset or axis on one rank would read rows of another array there
    agree_config(ctx, "load_hdf5", {"dataset": dataset, "axis": axis},
                 fix="pass the same dataset and axis on every rank")
    out = None
    with _validated(ctx):
        what = "load_hdf5"
        path = path_of(path, what)
        dataset = _check_name(dataset, what)
        if os.path.isdir(path):
            raise DataFileError(f"{what}: {path!r} is a folder; pass one HDF5 file (HDF5 "
                                f"files in it: {_listing(_hdf5_files_in(path))})")
        if not os.path.isfile(path):
            folder = os.path.dirname(os.path.abspath(path))
            raise DataFileNotFoundError(f"{what}: no file {path!r} (HDF5 files in {folder}: "
                                        f"{_listing(_hdf5_files_in(folder))})")
        try:
            h5file = h5py.File(path, "r")
        except OSError as error:
            raise DataFileError(f"{what}: {path!r} cannot be read as an HDF5 file ({error}); "
                                "pass an HDF5 file (h5py, h5dump and save_hdf5 make them)"
                                ) from None
        with h5file:
            node = h5file.get(dataset)
            if not isinstance(node, h5py.Dataset):
                kind = "a group" if node is not None else "no such dataset"
                raise MissingDatasetError(f"{what}: {path} has {kind} at {dataset!r}; its "
                                          f"datasets: {_listing(_datasets_in(h5file))}")
            axis = _check_axis(axis, node.ndim, what)
            start, stop = DataPartitioner(node.shape[axis], ctx.size).get_partition(ctx.rank)
            selection = [slice(None)] * node.ndim
            selection[axis] = slice(start, stop)
            out = node[tuple(selection)]
    return out


def _gathered_shape(infos, axis, what):
    """The global shape from every rank's (shape, dtype, axis); ConfigMismatchError on a
    mismatch."""
    for label, values in (("dtype", [info[1] for info in infos]),
                          ("axis", [info[2] for info in infos]),
                          ("ndim", [len(info[0]) for info in infos])):
        if len(set(values)) > 1:
            groups = {}
            for rank, value in enumerate(values):
                groups.setdefault(value, []).append(rank)
            raise ConfigMismatchError(f"{what}: ranks passed different {label}s: " + ", ".join(
                f"{value} on {format_ranks(ranks)}" for value, ranks in groups.items()))
    others = [info[0][:axis] + info[0][axis + 1:] for info in infos]
    if len(set(others)) > 1:
        raise ConfigMismatchError(
            f"{what}: the blocks' shapes must agree apart from axis {axis}, got "
            + ", ".join(f"rank {rank} {info[0]}" for rank, info in enumerate(infos)))
    lengths = [info[0][axis] for info in infos]
    shape = infos[0][0][:axis] + (sum(lengths),) + infos[0][0][axis + 1:]
    return shape, [int(x) for x in np.concatenate([[0], np.cumsum(lengths)])]


def _part_name(path, rank):
    """``data.rank_00001.h5`` for ``data.h5``: rank 1's file when h5py is serial."""
    stem, suffix = os.path.splitext(os.path.basename(path))
    return f"{stem}.rank_{rank:05d}{suffix or '.h5'}"


def save_hdf5(path, dataset, local, *, ctx=None, axis=0):
    """Write the distributed array whose blocks the ranks hold as one HDF5 dataset.

    Collective: every rank passes its block; the dataset is the
    concatenation of the blocks in rank order along ``axis`` (blocks may
    have any length there, zero included; the other dimensions and the
    dtype must agree). The file is opened in append mode: other datasets
    in it stay, a dataset of the same name is replaced.

    With h5py built against parallel HDF5 (and more than one rank) all ranks
    write ``path`` together (``driver="mpio"``). Otherwise each rank writes
    its block to ``<stem>.rank_NNNNN<suffix>`` next to ``path``, and ``path``
    gets a virtual dataset over those files (relative paths: keep the files
    together); plain h5py and :func:`load_hdf5` read it as one dataset.

    Parameters
    ----------
    path : str or path-like
    dataset : str
        Name in the file, e.g. ``"X"`` or ``"train/X"``.
    local : array of shape (..., n_local, ...)
        This rank's block (device arrays are copied to the host). Its dtype
        must be one HDF5 can store (numbers, bool, fixed-length bytes).
    ctx : Context, optional
    axis : int, default=0

    Examples
    --------
    >>> save_hdf5("out.h5", "X", X_local)           # doctest: +SKIP
    """
    ctx = resolve_context(ctx)
    what = "save_hdf5"
    with _validated(ctx):
        path = path_of(path, what)
        dataset = _check_name(dataset, what).strip("/")
        local = np.require(to_host(local), requirements="C")
        axis = _check_axis(axis, local.ndim, what)
        check_writable_file(path, what)
        try:
            h5py.h5t.py_create(local.dtype, logical=True)
        except TypeError:
            raise InvalidArgumentTypeError(
                f"{what}: HDF5 cannot store dtype {local.dtype}; convert the array "
                "(e.g. to a numeric or fixed-length bytes dtype)") from None
    infos = allgather_object((local.shape, local.dtype.str, axis), ctx=ctx)
    with _validated(ctx):
        shape, offsets = _gathered_shape(infos, axis, what)
    if ctx.size > 1 and h5py_is_parallel():
        _save_mpio(path, dataset, local, shape, offsets, axis, ctx)
    else:
        _save_parts(path, dataset, local, shape, offsets, axis, ctx)


def _hdf5_files_in(folder):
    """The names of the HDF5 files in ``folder``, sorted (none when it cannot be read)."""
    try:
        return sorted(name for name in os.listdir(folder)
                      if name.endswith((".h5", ".hdf5", ".hdf", ".he5")))
    except OSError:
        return []


def _as_file_error(error, path, dataset, what):
    """An OSError from h5py as a DataFileError naming the file; other errors unchanged."""
    if isinstance(error, OSError) and not isinstance(error, HpcdistError):
        return DataFileError(f"{what}: writing {dataset!r} to {path!r} failed: {error}")
    return error


def _replace(group, name):
    if name in group:
        del group[name]


def _save_mpio(path, dataset, local, shape, offsets, axis, ctx):
    error = None
    try:
        with h5py.File(path, "a", driver="mpio", comm=ctx.comm) as h5file:
            _replace(h5file, dataset)
            target = h5file.create_dataset(dataset, shape=shape, dtype=local.dtype)
            dxpl = collective_dxpl()
            mine = blocks_of(local.shape, axis, local.dtype.itemsize) if local.size else []
            rounds = max(len(blocks_of(shape[:axis] + (stop - start,) + shape[axis + 1:], axis,
                                       local.dtype.itemsize))
                         for start, stop in zip(offsets[:-1], offsets[1:]))
            for round_ in range(rounds if int(np.prod(shape)) else 0):
                if round_ < len(mine):
                    write_block(target, local, axis, offsets[ctx.rank], mine[round_], dxpl=dxpl)
                else:
                    write_empty(target, dxpl)
    except Exception as exc:  # noqa: BLE001 - shared with every rank
        error = _as_file_error(exc, path, dataset, "save_hdf5")
    raise_on_every_rank(ctx, error)


def _save_parts(path, dataset, local, shape, offsets, axis, ctx):
    error = None
    if ctx.size == 1:
        try:
            with h5py.File(path, "a") as h5file:
                _replace(h5file, dataset)
                h5file.create_dataset(dataset, data=local)
        except Exception as exc:  # noqa: BLE001 - re-raised below
            error = _as_file_error(exc, path, dataset, "save_hdf5")
        raise_on_every_rank(ctx, error)
        return
    folder = os.path.dirname(os.path.abspath(path))
    try:
        if local.size:
            with h5py.File(os.path.join(folder, _part_name(path, ctx.rank)), "a") as part:
                _replace(part, dataset)
                part.create_dataset(dataset, data=local)
    except Exception as exc:  # noqa: BLE001 - shared with every rank
        error = _as_file_error(exc, _part_name(path, ctx.rank), dataset, "save_hdf5")
    raise_on_every_rank(ctx, error)
    if ctx.rank == 0:
        try:
            with h5py.File(path, "a") as h5file:
                _replace(h5file, dataset)
                if int(np.prod(shape)) == 0:
                    h5file.create_dataset(dataset, shape=shape, dtype=local.dtype)
                else:
                    layout = h5py.VirtualLayout(shape=shape, dtype=local.dtype)
                    for rank, (start, stop) in enumerate(zip(offsets[:-1], offsets[1:])):
                        if stop == start:
                            continue
                        target = [slice(None)] * len(shape)
                        target[axis] = slice(start, stop)
                        layout[tuple(target)] = h5py.VirtualSource(
                            _part_name(path, rank), dataset,
                            shape=shape[:axis] + (stop - start,) + shape[axis + 1:])
                    h5file.create_virtual_dataset(dataset, layout)
        except Exception as exc:  # noqa: BLE001 - shared with every rank
            error = _as_file_error(exc, path, dataset, "save_hdf5")
    raise_on_every_rank(ctx, error)
