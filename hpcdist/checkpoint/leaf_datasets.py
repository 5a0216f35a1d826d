"""The HDF5 datasets of a checkpoint's leaves and the ``hpcdist_*`` attributes that type them."""

import h5py

__all__ = ["create_leaf_dataset", "describe_leaf"]


def create_leaf_dataset(group, path, entry, storage, shape):
    """Create the dataset of a leaf (contiguous, no fill) with its ``hpcdist_*`` attributes.

    Parameters
    ----------
    group : h5py.Group
    path : str
        The leaf's state path (the dataset's name).
    entry : dict
        The leaf's manifest entry.
    storage : numpy.dtype or None
        The dtype on disk (None for a ``"none"`` leaf).
    shape : sequence of int
        The global shape.

    Returns
    -------
    h5py.Dataset
    """
    if entry["kind"] == "none":
        dataset = group.create_dataset(path, data=h5py.Empty("i1"))
    else:
        dataset = group.create_dataset(path, shape=tuple(shape), dtype=storage,
                                       fill_time="never")
    describe_leaf(dataset, entry)
    return dataset


def describe_leaf(dataset, entry):
    """Write the ``hpcdist_*`` attributes that say how to read ``dataset`` back."""
    dataset.attrs["hpcdist_kind"] = entry["kind"]
    if entry.get("storage") == "opaque":
        dataset.attrs["hpcdist_dtype"] = entry["dtype"]["str"]
    if entry["kind"] in ("str", "bytes"):
        dataset.attrs["hpcdist_nbytes"] = entry["nbytes"]
