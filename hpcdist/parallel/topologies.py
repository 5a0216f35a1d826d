"""Gossip topologies: who averages with whom, and with which weights.

A topology is an undirected connected graph over the ranks: ``"ring"``,
``"exponential"`` (peers at distance ``2**k`` either way, as in Stochastic
Gradient Push), ``"complete"``, or a dict ``{rank: [peers]}``. The mixing
weights are Metropolis-Hastings weights, ``w_ij = 1 / (1 + max(d_i, d_j))``
for neighbours and ``w_ii = 1 - sum_j w_ij``: a symmetric, doubly
stochastic matrix for any such graph (Xiao and Boyd, 2004).
"""

from collections import deque

import numpy as np

from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError

__all__ = ["TOPOLOGIES", "topology_peers", "mixing_weights", "diameter"]

TOPOLOGIES = ("ring", "exponential", "complete")


def _named_peers(name, size):
    if name == "complete":
        return {rank: [peer for peer in range(size) if peer != rank] for rank in range(size)}
    distances = [1] if name == "ring" else [2 ** k for k in range(max(size - 1, 1).bit_length())]
    peers = {}
    for rank in range(size):
        near = [(rank + sign * distance) % size for distance in distances for sign in (-1, 1)]
        peers[rank] = sorted({peer for peer in near if peer != rank})
    return peers


def _checked_peers(topology, size):
    """A dict topology checked: every rank present, peers inside the world, symmetric."""
    keys = set()
    for key in topology:
        if isinstance(key, (bool, np.bool_)) or not isinstance(key, (int, np.integer)):
            raise InvalidArgumentTypeError(f"GossipSGD: topology key {key!r} should be a rank "
                                           "(an int)")
        if not 0 <= key < size:
            raise InvalidArgumentError(f"GossipSGD: topology names rank {key}, outside the "
                                       f"world of {size} ranks (0..{size - 1})")
        keys.add(int(key))
    missing = sorted(set(range(size)) - keys)
    if missing:
        raise InvalidArgumentError(f"GossipSGD: topology has no entry for rank(s) {missing}; "
                                   f"give every rank 0..{size - 1} its list of peers")
    peers = {}
    for key, listed in topology.items():
        rank, found = int(key), set()
        for peer in np.atleast_1d(np.asarray(listed, dtype=object)).tolist() if listed is not None \
                else []:
            if isinstance(peer, bool) or not isinstance(peer, (int, np.integer)):
                raise InvalidArgumentTypeError(f"GossipSGD: topology[{rank}] holds {peer!r}, not "
                                               "a rank (an int)")
            if not 0 <= peer < size:
                raise InvalidArgumentError(f"GossipSGD: topology[{rank}] names rank {peer}, "
                                           f"outside the world of {size} ranks (0..{size - 1})")
            if peer != rank:
                found.add(int(peer))
        peers[rank] = sorted(found)
    for rank, listed in peers.items():
        for peer in listed:
            if rank not in peers[peer]:
                raise InvalidArgumentError(
                    f"GossipSGD: topology is not symmetric: rank {rank} lists {peer} but rank "
                    f"{peer} does not list {rank}; add {rank} to topology[{peer}]")
    return peers


def topology_peers(topology, size):
    """``{rank: sorted peers}`` of a named or dict topology, checked.

    Raises
    ------
    InvalidArgumentError
        An unknown name, a rank outside the world, a missing rank, an
        asymmetric or disconnected graph.
    """
    if isinstance(topology, str):
        if topology not in TOPOLOGIES:
            raise InvalidArgumentError(f"GossipSGD: topology={topology!r} is unknown; use one "
                                       f"of {', '.join(map(repr, TOPOLOGIES))} or a dict "
                                       "{rank: [peers]}")
        return _named_peers(topology, size)
    if not isinstance(topology, dict):
        raise InvalidArgumentTypeError(f"GossipSGD: topology is a {type(topology).__name__}; "
                                       f"use one of {', '.join(map(repr, TOPOLOGIES))} or a "
                                       "dict {rank: [peers]}")
    peers = _checked_peers(topology, size)
    reached = _distances(peers, 0)
    if len(reached) < size:
        unreached = sorted(set(range(size)) - set(reached))
        raise InvalidArgumentError(f"GossipSGD: topology is not connected: rank(s) {unreached} "
                                   "cannot be reached from rank 0; add edges between the parts")
    return peers


def _distances(peers, start):
    """Hops from ``start`` to every rank it reaches (breadth first)."""
    distances, queue = {start: 0}, deque([start])
    while queue:
        rank = queue.popleft()
        for peer in peers[rank]:
            if peer not in distances:
                distances[peer] = distances[rank] + 1
                queue.append(peer)
    return distances


def diameter(peers):
    """The largest number of hops between two ranks."""
    return max(max(_distances(peers, rank).values()) for rank in peers)


def mixing_weights(peers, rank):
    """Metropolis-Hastings weights of ``rank``: its own and one per peer (in ``peers[rank]``'s
    order).

    Returns
    -------
    (float, ndarray of shape (n_peers,))
    """
    degree = len(peers[rank])
    weights = np.array([1.0 / (1 + max(degree, len(peers[peer]))) for peer in peers[rank]])
    return 1.0 - float(weights.sum()), weights
