"""TLS for one phase: a certificate made for it and handed to its ranks over MPI.

A Dask scheduler runs whatever pickled function a client sends it, so a
phase admits only holders of its own certificate: rank 0 makes a fresh
self-signed certificate and key (``distributed.security.Security.temporary``),
the ranks receive them over MPI, and every connection (scheduler, workers,
client) is mutual TLS with that certificate as the only authority. Nothing
is written to a shared or persistent file: the PEM text stays in memory
(Python's ``ssl`` reads it for a moment from a private temporary directory
of distributed's, deleted at once).
"""

__all__ = ["new_certificate", "phase_security"]


def new_certificate():
    """A new self-signed certificate and its private key, as PEM text.

    Returns
    -------
    (str, str)
        The certificate (also the phase's only certificate authority) and the key.
    """
    from distributed.security import Security  # the dask extra (with cryptography)

    temporary = Security.temporary()
    return temporary.tls_ca_file, temporary.tls_scheduler_key


def phase_security(certificate):
    """The ``distributed.security.Security`` of every role for a phase's certificate.

    Parameters
    ----------
    certificate : (str, str)
        The PEM certificate and key of :func:`new_certificate`.

    Returns
    -------
    distributed.security.Security
        Encryption required; the certificate is the authority, and the
        certificate of the scheduler, the workers and the client.
    """
    from distributed.security import Security  # the dask extra

    cert, key = certificate
    return Security(require_encryption=True, tls_ca_file=cert,
                    tls_scheduler_cert=cert, tls_scheduler_key=key,
                    tls_worker_cert=cert, tls_worker_key=key,
                    tls_client_cert=cert, tls_client_key=key)
