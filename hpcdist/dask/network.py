"""Where a phase's servers listen: loopback on one node, else an interface or the default route."""

import socket

from ..comm.checks import validated_on_every_rank
from ..exceptions import InvalidArgumentError

__all__ = ["phase_host"]

LOOPBACK = "127.0.0.1"


def _interface_address(interface, where):
    from distributed.utils import get_ip_interface  # the dask extra

    try:
        return get_ip_interface(interface)
    except ValueError as error:
        raise InvalidArgumentError(f"{where}: interface={interface!r}: {error} (on "
                                   f"{socket.gethostname()})") from None


def phase_host(phase, interface, hostnames, where):
    """The IP address this rank's Dask server or client uses (collective).

    Parameters
    ----------
    phase : Context
        The phase's context; every rank calls this.
    interface : str or None
        A network interface name (``"ib0"``): its IPv4 address on every
        node. None: the loopback address when all ranks share one node,
        else the address of the node's default route.
    hostnames : list of str
        Every rank's host name, in rank order.
    where : str
        The caller, for messages.

    Returns
    -------
    str

    Raises
    ------
    InvalidArgumentError
        On every rank, when the interface does not exist or has no IPv4
        address on some node (naming the ranks and the interfaces there).
    """
    if interface is not None:  # the same on every rank (agreed)
        with validated_on_every_rank(phase):
            address = _interface_address(interface, where)
        return address
    if len(set(hostnames)) == 1:
        return LOOPBACK
    from distributed.utils import get_ip  # the dask extra

    return get_ip()
