"""Gradient buckets: parameters grouped into flat buffers for communication.

Gradients are bucketed in *reverse* registration order, which is roughly the
order in which a backward pass produces them, so the first bucket fills (and
can start communicating) while the backward pass is still running. Each
parameter's ``grad`` becomes a view into its bucket's flat buffer, so layers
accumulate straight into the buffer that is communicated: no copies.
"""

import numpy as np

from ..nn.module import array_module

__all__ = ["Bucket", "assign_buckets", "bucket_groups"]


class Bucket:
    """Parameters of one dtype whose gradients travel in one flat buffer.

    Parameters
    ----------
    index : int
        Position in the launch order (the same on every rank).
    entries : list of (str, Parameter)
        Named parameters, in the order their gradients are expected.

    Attributes
    ----------
    flat : ndarray of shape (n_elements,)
        The communication buffer; each parameter's ``grad`` is a view into it.
    """

    def __init__(self, index, entries):
        self.index = index
        self.names = [name for name, _ in entries]
        self.parameters = [parameter for _, parameter in entries]
        first = self.parameters[0].data
        xp = array_module(first)
        self.dtype = first.dtype
        self.flat = xp.zeros(sum(p.size for p in self.parameters), dtype=self.dtype)
        self.views = []
        offset = 0
        for parameter in self.parameters:
            view = self.flat[offset:offset + parameter.size].reshape(parameter.shape)
            if parameter.grad is not None:
                view[...] = parameter.grad
            parameter.grad = view
            self.views.append(view)
            offset += parameter.size
        self.ready = set()      # ids of parameters whose gradient arrived this backward
        self.touched = set()    # ids with any gradient since the last synchronisation
        self.request = None     # the in-flight allreduce, if any

    @property
    def nbytes(self):
        return self.flat.nbytes

    @property
    def complete(self):
        return len(self.ready) == len(self.parameters)

    def rebind(self, parameter, position):
        """Make ``parameter.grad`` the bucket view again (a user may have replaced it)."""
        view = self.views[position]
        if parameter.grad is view:
            return
        if parameter.grad is None:
            view[...] = 0
        else:
            view[...] = parameter.grad
        parameter.grad = view

    def zero_untouched(self):
        """Parameters that got no gradient since the last sync contribute zeros."""
        for position, parameter in enumerate(self.parameters):
            if id(parameter) not in self.touched:
                view = self.views[position]
                view[...] = 0
                parameter.grad = view

    def reset(self):
        self.ready.clear()
        self.touched.clear()
        self.request = None


def assign_buckets(named_parameters, bucket_bytes):
    """Group parameters into buckets of at most ``bucket_bytes`` (reverse order).

    A parameter larger than ``bucket_bytes`` gets a bucket of its own;
    ``bucket_bytes=0`` gives one bucket per parameter. Parameters of
    different dtypes or array modules never share a bucket.

    Parameters
    ----------
    named_parameters : list of (str, Parameter)
        In registration order.
    bucket_bytes : float
        Capacity of a bucket in bytes (``inf`` for a single bucket per dtype).

    Returns
    -------
    list of Bucket
        In launch order.
    """
    return [Bucket(index, entries)
            for index, entries in enumerate(bucket_groups(named_parameters, bucket_bytes))]


def bucket_groups(named_parameters, bucket_bytes):
    """The grouping of :func:`assign_buckets`, without allocating buffers.

    Returns
    -------
    list of list of (str, Parameter)
        In launch order (reverse registration order), each group of one dtype
        and array module and at most ``bucket_bytes`` (or one parameter).
    """
    groups = []
    current, current_bytes, current_kind = [], 0, None
    for name, parameter in reversed(named_parameters):
        kind = (np.dtype(parameter.dtype).str, array_module(parameter.data).__name__)
        fits = current and kind == current_kind and current_bytes + parameter.nbytes <= bucket_bytes
        if current and not fits:
            groups.append(current)
            current, current_bytes = [], 0
        current.append((name, parameter))
        current_bytes += parameter.nbytes
        current_kind = kind
    if current:
        groups.append(current)
    return groups
