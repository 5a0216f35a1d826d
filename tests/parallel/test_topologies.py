"""Gossip topologies: peers, Metropolis-Hastings weights, checks of a dict topology."""
import numpy as np
import pytest

import hpcdist
from hpcdist.parallel.topologies import diameter, mixing_weights, topology_peers


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 8, 13])
@pytest.mark.parametrize("name", ["ring", "exponential", "complete"])
def test_named_topologies_give_doubly_stochastic_symmetric_mixing(name, size):
    peers = topology_peers(name, size)
    W = np.zeros((size, size))
    for rank in range(size):
        own, weights = mixing_weights(peers, rank)
        W[rank, rank] = own
        W[rank, peers[rank]] = weights
    np.testing.assert_allclose(W, W.T, atol=1e-15)
    np.testing.assert_allclose(W.sum(axis=0), 1.0, atol=1e-15)
    assert (W >= 0).all()
    if name == "complete":
        np.testing.assert_allclose(W, 1.0 / size, atol=1e-15)
        assert diameter(peers) == min(size - 1, 1)
    if name == "ring":
        assert all(len(p) == min(2, size - 1) for p in peers.values())
        assert diameter(peers) == size // 2
    if name == "exponential" and size == 8:
        assert peers[0] == [1, 2, 4, 6, 7]


def test_dict_topology_is_taken_as_given():
    peers = topology_peers({0: [1], 1: [0, 2], 2: [1]}, 3)
    assert peers == {0: [1], 1: [0, 2], 2: [1]}
    assert diameter(peers) == 2
    assert mixing_weights(peers, 0) == (pytest.approx(2 / 3), pytest.approx([1 / 3]))


@pytest.mark.parametrize("topology, match", [
    ("star", r"topology='star' is unknown"),
    ({0: [1], 1: [0], 4: []}, r"names rank 4, outside the world of 3 ranks"),
    ({0: [1], 1: [0, 3], 2: []}, r"topology\[1\] names rank 3, outside the world of 3"),
    ({0: [1], 1: [0]}, r"no entry for rank\(s\) \[2\]"),
    ({0: [1], 1: [2], 2: [1]}, r"not symmetric: rank 1 lists 2 but rank 2 .*|"
                               r"not symmetric: rank 0 lists 1 but rank 1 does not list 0"),
    ({0: [1], 1: [0], 2: []}, r"not connected: rank\(s\) \[2\] cannot be reached"),
])
def test_bad_topologies_name_the_problem(topology, match):
    with pytest.raises(hpcdist.InvalidArgumentError, match=match):
        topology_peers(topology, 3)


def test_topology_of_a_wrong_type():
    with pytest.raises(hpcdist.InvalidArgumentTypeError, match="topology is a list"):
        topology_peers([[1], [0]], 2)
    with pytest.raises(hpcdist.InvalidArgumentTypeError, match=r"topology\[0\] holds 'a'"):
        topology_peers({0: ["a"], 1: [0]}, 2)
