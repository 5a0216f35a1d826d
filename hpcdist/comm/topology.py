"""Which ranks share a node: local ranks, node ranks and per-node communicators."""

from dataclasses import dataclass

from .._environment import ranks_per_node_override
from .mpi import MPI

__all__ = ["Topology", "detect_topology"]


@dataclass
class Topology:
    """Where a rank sits among the nodes of a communicator.

    Attributes
    ----------
    local_rank, local_size : int
        The rank's index on its node, and how many ranks the node has.
    node_rank, num_nodes : int
        The node's index (nodes numbered by their lowest rank) and the node count.
    node_comm : mpi4py.MPI.Comm or None
        The ranks of this node (None when the communicator has one rank).
    leader_comm : mpi4py.MPI.Comm or None
        The local rank 0 of every node, on those ranks only.
    """

    local_rank: int = 0
    local_size: int = 1
    node_rank: int = 0
    num_nodes: int = 1
    node_comm: object = None
    leader_comm: object = None

    def free(self):
        """Release the communicators."""
        for comm in (self.node_comm, self.leader_comm):
            if comm is not None and comm != MPI.COMM_NULL:
                comm.Free()
        self.node_comm = self.leader_comm = None


def detect_topology(comm):
    """Split ``comm`` by shared-memory node.

    ``HPCDIST_RANKS_PER_NODE=k`` groups consecutive ranks into nodes of
    ``k`` instead, to exercise multi-node code paths on one machine.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm

    Returns
    -------
    Topology
    """
    if comm.Get_size() == 1:
        return Topology()
    ranks_per_node = ranks_per_node_override()
    if ranks_per_node is None:
        node_comm = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    else:
        node_comm = comm.Split(comm.Get_rank() // ranks_per_node, key=comm.Get_rank())
    local_rank = node_comm.Get_rank()
    leader_comm = comm.Split(0 if local_rank == 0 else MPI.UNDEFINED, key=comm.Get_rank())
    if local_rank == 0:
        node_info = [leader_comm.Get_rank(), leader_comm.Get_size()]
    else:
        node_info = None
        leader_comm = None
    node_rank, num_nodes = node_comm.bcast(node_info, root=0)
    return Topology(local_rank, node_comm.Get_size(), node_rank, num_nodes, node_comm, leader_comm)
