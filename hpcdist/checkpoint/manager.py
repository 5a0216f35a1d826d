"""CheckpointManager: save, list and restore distributed HDF5 checkpoints."""

import json
import numbers
import os
import warnings

from .._checks import check_int
from .._hdf5_blocks import h5py_is_parallel
from ..comm import allgather_object, broadcast_object, resolve_context
from ..comm.agreement import agree_config
from ..comm.checks import format_ranks, mark_raised_on_every_rank, validated_on_every_rank
from ..comm.mpi import MPI
from ..exceptions import ConfigMismatchError, InvalidArgumentError, InvalidArgumentTypeError
from . import mpio, sharded  # called through their modules: tests replace their writers
from .async_save import BackgroundSave, track
from .checksum import combine_items, format_crc, io_threads
from .commit import (
    apply_retention,
    cleanup_temporaries,
    commit_step,
    list_steps,
    new_temp_dir,
    remove_tree,
    step_dir_name,
)
from .errors import CheckpointCorruptError, CheckpointError, CheckpointWarning
from .manifest import ManifestError, build_manifest, manifest_bytes
from .plan import describe, local_writes, make_plan
from .restore import load_manifest, read_state, verify_files
from .state import Leaf, flatten_state

__all__ = ["CheckpointManager", "BACKENDS"]

BACKENDS = ("auto", "sharded", "mpio")


def _thread_multiple():
    """Whether MPI runs at ``MPI_THREAD_MULTIPLE`` (a query; no communication)."""
    return MPI.Query_thread() == MPI.THREAD_MULTIPLE


def _error_text(error):
    return f"{type(error).__name__}: {error}"


def _check_metadata(metadata):
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise InvalidArgumentTypeError(
            f"metadata should be a dict (JSON-serialisable) or None, got "
            f"{type(metadata).__name__}")
    try:
        return json.loads(json.dumps(metadata, allow_nan=False))
    except (TypeError, ValueError) as error:
        raise InvalidArgumentTypeError(
            f"metadata should be JSON-serialisable (str keys; numbers, strings, "
            f"lists, dicts; no NaN): {error}") from None


_LARGEST_STEP = 2**63 - 1  # steps are written as 64-bit integers

class CheckpointManager:
    """Distributed HDF5 checkpoints of a training state, crash-safe and reshardable.

    Every rank creates the manager and calls :meth:`save`, :meth:`restore`
    and :meth:`wait` together (they are collective); :meth:`steps`,
    :meth:`latest_step` and :meth:`metadata` only read the directory.

    Parameters
    ----------
    directory : str or path-like
        Where the steps go (created if missing). It must be on a file
        system every rank sees (the same path on every rank). One job at a
        time owns a directory: creating a manager removes what interrupted
        saves left there.
    max_to_keep : int or None, default=3
        Committed steps kept; after each successful save the oldest beyond
        this are deleted (never the step just saved). None keeps all.
    backend : {"auto", "sharded", "mpio"}, default="auto"
        How steps are written (either kind restores with either backend, at
        any world size):

        ``"sharded"``
            Every rank writes its own ``rank_NNNNN.h5``; rank 0 writes
            ``index.h5``, which shows all of it through HDF5 virtual datasets.
            Ranks never wait for each other while writing. Serial h5py is
            enough.
        ``"mpio"``
            One ``index.h5`` written collectively with parallel HDF5 (needs
            h5py built with MPI, ``h5py.get_config().mpi``). With it, an
            error inside HDF5 on one rank can leave the others waiting in a
            collective write (MPI-IO is not watched by the stall watchdog).
        ``"auto"``
            ``"mpio"`` when h5py is parallel, there is more than one rank
            and ``async_save`` is off; else ``"sharded"``.
    async_save : bool, default=False
        Write in a background thread: :meth:`save` returns once the state
        is copied to host memory, and the write overlaps training. At most
        one save is in flight: the next :meth:`save` (or :meth:`wait`)
        first waits for it and commits it, and raises its error if it
        failed. A step saved in the background is visible (committed) only
        after that. With the mpio backend it needs ``MPI_THREAD_MULTIPLE``
        (parallel HDF5 then runs on a communicator of its own).
    ctx : Context or mpi4py.MPI.Comm, optional
        Default: the default context. A raw communicator gets one context
        of its own (see :func:`hpcdist.comm.resolve_context`).

    Attributes
    ----------
    directory : str
        Absolute path of the checkpoint directory.
    backend : {"sharded", "mpio"}
        The resolved backend.
    restored_step : int or None
        The step the last :meth:`restore` loaded.
    restored_metadata : dict or None
        Its ``metadata``.

    Notes
    -----
    What is stored. ``state`` is a dict of dicts, lists, tuples, NumPy
    arrays (any dtype without Python objects: bool, integers, float16 to
    longdouble, complex, datetime64, strings, structured, bfloat16, ...;
    bit-identical), :class:`Sharded` arrays, NumPy scalars, and ``bool``,
    ``int`` (any size), ``float``, ``complex``, ``str``, ``bytes``,
    ``None``; everything comes back with its type (device arrays come back
    as NumPy arrays, lists and tuples as lists and tuples). Keys are
    non-empty ``str`` without ``/``, ``..`` or NUL. Entries not wrapped in
    :class:`Sharded` are replicated: every rank holds the same value and it
    is written once (rank 0's value; large arrays striped over the ranks).
    Nothing is pickled, on saving or loading.

    What restore returns. The same nested structure; a :class:`Sharded`
    entry comes back as a plain NumPy array: this rank's block of the global
    array along its axis, split as :class:`hpcdist.data.DataPartitioner`
    splits it over the *current* number of ranks (so a checkpoint written
    at 4 ranks restores at 1, 2 or 3).

    On disk (see :mod:`hpcdist.checkpoint.commit`): each step is a directory
    ``step_NNNNNNNNN`` with ``index.h5`` (open it with plain h5py or
    ``h5dump`` to see every entry as one global dataset), the rank files,
    ``manifest.json`` (format version, world size, every entry's shape,
    dtype and offsets, every file's size and CRC-32) and ``COMMIT``. A save
    is written into a temporary directory and renamed into place after every
    rank reported success and everything was fsynced, so a crash never
    leaves a visible partial step. :meth:`restore` verifies the checksums
    and falls back to older steps (with a :class:`CheckpointWarning`) when
    files are missing, truncated or corrupted.

    Examples
    --------
    >>> mgr = CheckpointManager("ckpt", max_to_keep=2)             # doctest: +SKIP
    >>> mgr.save(100, {"model": {"w": w}, "X": Sharded(X_local), "epoch": 3})
    >>> state = mgr.restore()          # the newest valid step     # doctest: +SKIP
    >>> mgr.restored_step                                          # doctest: +SKIP
    100
    """

    def __init__(self, directory, *, max_to_keep=3, backend="auto", async_save=False, ctx=None):
        self.ctx = ctx = resolve_context(ctx)
        self._pending = None
        self._io_ctx = None
        self.restored_step = None
        self.restored_metadata = None
        with validated_on_every_rank(ctx):
            try:
                self.directory = os.path.abspath(os.fspath(directory))
            except TypeError:
                raise InvalidArgumentTypeError(f"directory should be a str or path-like, got "
                                               f"{type(directory).__name__}") from None
            if not os.fspath(directory):
                raise InvalidArgumentError("directory='' names no directory; pass the "
                                           "checkpoints' own directory (\".\" for this one)")
            if max_to_keep is not None:
                max_to_keep = check_int(max_to_keep, "max_to_keep", minimum=1,
                                        hint=" (or None to keep every step)")
            self.max_to_keep = max_to_keep
            if backend not in BACKENDS:
                raise InvalidArgumentError(f"backend={backend!r} should be one of {BACKENDS}")
            if not isinstance(async_save, (bool, numbers.Integral)):
                raise InvalidArgumentTypeError(f"async_save={async_save!r} should be a bool")
            self.async_save = bool(async_save)
            self.backend = self._resolve_backend(backend)
        self._threads = io_threads(ctx.local_size)
        ctx.run_setup(self._set_up)
        track(self)

    def _set_up(self):
        """The collective part of the construction: the ranks agree on the settings, the
        directory is ready on every rank, parallel HDF5's thread has its communicator."""
        ctx = self.ctx
        agree_config(ctx, "CheckpointManager", {
            "directory": self.directory, "max_to_keep": self.max_to_keep,
            "backend": self.backend, "async_save": self.async_save},
            fix="every rank passes the same settings (one directory on a file system all ranks "
                "share)")
        self._prepare_directory()
        if self.backend == "mpio" and self.async_save and ctx.size > 1:
            self._io_ctx = ctx.split(0)  # parallel HDF5's own communicator for the thread

    def _resolve_backend(self, backend):
        parallel = h5py_is_parallel()
        if backend == "mpio" and not parallel:
            raise CheckpointError(
                "backend='mpio' needs h5py built against parallel HDF5, but "
                "h5py.get_config().mpi is False here; use backend='sharded' (or 'auto'), or "
                "install a parallel h5py (CC=mpicc HDF5_MPI=ON pip install --no-binary=h5py "
                "h5py, against an MPI-enabled HDF5)")
        if backend == "auto":
            use_mpio = parallel and self.ctx.size > 1 and not self.async_save
            backend = "mpio" if use_mpio else "sharded"
        if backend == "mpio" and self.async_save and self.ctx.size > 1 \
                and not _thread_multiple():
            raise CheckpointError(
                "backend='mpio' with async_save=True writes from a background thread, which "
                "needs MPI_THREAD_MULTIPLE; this MPI runs at a lower thread level. Use "
                "backend='sharded' (its background thread makes no MPI calls)")
        return backend

    def _prepare_directory(self):
        """Rank 0 creates the directory and removes temporaries; all check they see it."""
        ctx = self.ctx
        error = None
        if ctx.rank == 0:
            try:
                os.makedirs(self.directory, exist_ok=True)
                cleanup_temporaries(self.directory)
            except OSError as exc:
                error = f"cannot create or clean checkpoint directory {self.directory}: {exc}"
        error = broadcast_object(error, ctx=ctx)
        if error:  # rank 0's verdict, broadcast: every rank raises it
            raise mark_raised_on_every_rank(CheckpointError(error))
        with validated_on_every_rank(ctx):
            if not os.path.isdir(self.directory):
                raise CheckpointError(
                    f"checkpoint directory {self.directory} created by rank 0 does not exist "
                    f"on rank {ctx.rank}: use a directory on a file system shared by all ranks")

    def __repr__(self):
        return (f"CheckpointManager({self.directory!r}, max_to_keep={self.max_to_keep}, "
                f"backend={self.backend!r}, async_save={self.async_save})")

    # -- listing (local) ------------------------------------------------------------------------
    def steps(self):
        """The committed steps, ascending (reads the directory; no communication).

        A step still being written in the background is not listed until
        it is committed (at the next :meth:`save` or :meth:`wait`).
        """
        return list_steps(self.directory)

    def latest_step(self):
        """The newest committed step, or None (no communication).

        Its files are not verified here; :meth:`restore` verifies them and
        falls back to an older step if they are damaged.
        """
        steps = self.steps()
        return steps[-1] if steps else None

    def metadata(self, step=None):
        """The ``metadata`` saved with ``step`` (default: the newest), or None.

        Reads only that step's manifest (no communication, no checksums).

        Raises
        ------
        CheckpointError
            No such committed step, or its manifest is unreadable.
        """
        if step is None:
            step = self.latest_step()
            if step is None:
                raise CheckpointError(f"no committed checkpoint in {self.directory}")
        step = check_int(step, "step", minimum=0)
        if step not in self.steps():
            raise CheckpointError(f"no committed step {step} in {self.directory}; committed "
                                  f"steps: {self.steps()}")
        return load_manifest(os.path.join(self.directory, step_dir_name(step)),
                             step)["metadata"]

    # -- saving -----------------------------------------------------------------------------
    def save(self, step, state, *, metadata=None):
        """Write ``state`` as ``step`` (collective: every rank calls it).

        Parameters
        ----------
        step : int
            In ``[0, 2**63 - 1]``, the same on every rank, and not below the
            newest step in the directory (steps only go forward: a new run
            takes a new directory). The newest step saved again is replaced.
        state : dict
            Nested dict (lists, tuples) of arrays, :class:`Sharded` arrays
            and scalars; the same entries on every rank (see the class
            notes).
        metadata : dict, optional
            JSON-serialisable; kept in the manifest (rank 0's), read back
            with :meth:`metadata` or ``restored_metadata``.

        Raises
        ------
        ValueError, TypeError
            Bad arguments, a step below the newest one in the directory, or
            states that differ between ranks (on every rank, naming the entry
            and the ranks), before anything is written.
        ConfigMismatchError
            A replicated entry (written once, from rank 0) whose value differs
            between ranks (compared by the CRC-32 of its bytes).
        CheckpointError
            Writing or committing failed on some rank (on every rank; the
            previous steps are untouched and nothing new is visible). With
            ``async_save=True`` this is also how the failure of the
            previous background save surfaces.
        """
        self.wait()
        ctx = self.ctx
        with validated_on_every_rank(ctx):
            step = check_int(step, "step", minimum=0, maximum=_LARGEST_STEP)
            if ctx.rank == 0:
                self._refuse_going_back(step)
            metadata = _check_metadata(metadata)
            nodes = flatten_state(state)
            description = describe(nodes)
        gathered = allgather_object((step, description), ctx=ctx)
        with validated_on_every_rank(ctx):
            steps = [s for s, _ in gathered]
            if len(set(steps)) > 1:
                raise ConfigMismatchError("save: ranks passed different steps: " + ", ".join(
                    f"step={s} on {format_ranks([r for r, t in enumerate(steps) if t == s])}"
                    for s in sorted(set(steps))))
            plan = make_plan([d for _, d in gathered], step, self.backend)
            leaves = {path: node for path, node in nodes if isinstance(node, Leaf)}
            writes = local_writes(plan, leaves, ctx.rank, copy=self.async_save)
        del nodes, leaves
        temp = self._new_temp(step)
        target = self._writer(os.path.join(self.directory, temp), plan, writes)
        info = (step, temp, plan, metadata)
        if self.async_save:
            self._pending = BackgroundSave(target, info, name=f"hpcdist-checkpoint-{step}")
            return
        try:
            result, error = target(), None
        except Exception as exc:  # noqa: BLE001 - shared with every rank in _commit
            result, error = None, exc
        self._commit(info, result, error)

    def _refuse_going_back(self, step):
        """Raise unless ``step`` is at least the newest committed step: below it,
        :meth:`restore` would still return the newer one (another run's, mostly)."""
        newer = [s for s in self.steps() if s > step]
        if newer:
            raise InvalidArgumentError(
                f"save(step={step}): {self.directory} already holds the later step(s) "
                f"{newer}, and restore() returns the newest; steps only go forward in a "
                f"directory: save under a step >= {newer[-1]}, or use a new directory for a "
                "new run")

    def _new_temp(self, step):
        name = error = None
        if self.ctx.rank == 0:
            try:
                name = new_temp_dir(self.directory, step)
            except OSError as exc:
                error = _error_text(exc)
        name, error = broadcast_object((name, error), ctx=self.ctx)
        if error:
            raise CheckpointError(f"save(step={step}): cannot create a temporary directory in "
                                  f"{self.directory}: {error}")
        return name

    def _writer(self, temp_path, plan, writes):
        rank, size, threads = self.ctx.rank, self.ctx.size, self._threads
        if self.backend == "mpio":
            comm = (self._io_ctx or self.ctx).comm
            return lambda: mpio.write_mpio(temp_path, plan, writes, rank, size, comm, threads)
        return lambda: sharded.write_sharded(temp_path, plan, writes, rank, threads)

    def wait(self):
        """Finish the save in flight, if any (collective): wait, then commit it.

        Raises
        ------
        CheckpointError
            The background save failed on some rank (nothing committed).
        """
        pending, self._pending = self._pending, None
        if pending is not None:
            self._commit(pending.info, *pending.join())

    def _commit(self, info, result, error):
        """Agree that every rank wrote its files; rank 0 commits (collective)."""
        step, temp, plan, metadata = info
        ctx = self.ctx
        report = {"error": None if error is None else _error_text(error),
                  "files": {} if result is None else result["files"],
                  "parts": [] if result is None else result["parts"]}
        reports = allgather_object(report, ctx=ctx)
        temp_path = os.path.join(self.directory, temp)
        failed = {rank: r["error"] for rank, r in enumerate(reports) if r["error"]}
        if failed:
            if ctx.rank == 0:
                remove_tree(temp_path)
            messages = {}
            for rank, message in failed.items():
                messages.setdefault(message, []).append(rank)
            text = "; ".join(f"{format_ranks(ranks)}: {message}"
                             for message, ranks in messages.items())
            raise CheckpointError(
                f"save(step={step}) failed on {text}; nothing was committed (the committed "
                f"steps are still {self.steps()})") from error
        status = None
        if ctx.rank == 0:
            try:
                files = self._file_table(reports)
                manifest = build_manifest(plan, files, metadata)
                commit_step(self.directory, temp, step, manifest_bytes(manifest))
            except Exception as exc:  # noqa: BLE001 - shared with every rank below
                status = _error_text(exc)
                remove_tree(temp_path)
            else:
                try:
                    apply_retention(self.directory, self.max_to_keep, keep=step)
                except OSError as exc:
                    warnings.warn(f"hpcdist checkpoint: deleting old steps in {self.directory} "
                                  f"failed: {exc}", CheckpointWarning, stacklevel=3)
        status = broadcast_object(status, ctx=ctx)
        if status is not None:
            raise CheckpointError(f"save(step={step}): committing on rank 0 failed: {status}; "
                                  "nothing was committed")

    @staticmethod
    def _file_table(reports):
        """``{name: {"size", "crc32"}}`` from every rank's report."""
        sizes = {}
        for report in reports:
            for name, size in report["files"].items():
                if sizes.setdefault(name, size) != size:
                    raise CheckpointError(f"ranks see different sizes of {name} ({sizes[name]} "
                                          f"and {size} bytes): is the directory on a shared "
                                          "file system?")
        parts = [part for report in reports for part in report["parts"]]
        covered = {}
        for name, _, length, _ in parts:
            covered[name] = covered.get(name, 0) + length
        crcs = combine_items(parts)
        table = {}
        for name, size in sizes.items():
            if covered.get(name, 0) != size:
                raise CheckpointError(f"checksums of {name} cover {covered.get(name, 0)} of "
                                      f"its {size} bytes")
            table[name] = {"size": size, "crc32": format_crc(crcs.get(name, 0))}
        return table

    # -- restoring ----------------------------------------------------------------------------
    def restore(self, step=None):
        """Load a step (collective): by default the newest one that verifies.

        Parameters
        ----------
        step : int, optional
            The step to load; None: the newest committed step whose files
            verify, skipping damaged ones with a :class:`CheckpointWarning`
            that names the step and the file.

        Returns
        -------
        dict
            The saved state, with :class:`Sharded` entries replaced by this
            rank's block of the global array (a NumPy array) re-split for
            the current number of ranks. ``restored_step`` and
            ``restored_metadata`` say what was loaded.

        Raises
        ------
        ConfigMismatchError
            ``step`` differs across ranks (on every rank, naming each rank's).
        CheckpointError
            No committed step (or no step ``step``); a manifest of an
            unknown format version.
        CheckpointCorruptError
            ``step`` was given and is damaged, or every step is damaged
            (the message lists each with its reason).
        """
        self.wait()
        ctx = self.ctx
        with validated_on_every_rank(ctx):
            if step is not None:
                step = check_int(step, "step", minimum=0)
        agree_config(ctx, "CheckpointManager.restore", {"step": step},
                     fix="pass the same step on every rank (None: the newest valid one)")
        committed = broadcast_object(self.steps() if ctx.rank == 0 else None, ctx=ctx)
        if step is not None:
            if step not in committed:
                raise CheckpointError(f"restore(step={step}): no committed step {step} in "
                                      f"{self.directory}; committed steps: {committed}")
            candidates = [step]
        else:
            candidates = committed[::-1]
        if not candidates:
            raise CheckpointError(f"restore: no committed checkpoint in {self.directory} "
                                  "(latest_step() is None)")
        skipped = []
        for candidate in candidates:
            step_dir = os.path.join(self.directory, step_dir_name(candidate))
            problems, state, manifest = self._try_step(step_dir, candidate)
            if not problems:
                self.restored_step = candidate
                self.restored_metadata = manifest["metadata"]
                return state
            reason = "; ".join(problems)
            if step is not None:
                raise CheckpointCorruptError(f"restore(step={candidate}): {step_dir} is "
                                             f"unusable: {reason}")
            skipped.append(f"step {candidate}: {reason}")
            warnings.warn(f"hpcdist checkpoint: step {candidate} ({step_dir}) is unusable: "
                          f"{reason}; trying an older step", CheckpointWarning, stacklevel=2)
        raise CheckpointCorruptError(f"restore: no valid checkpoint in {self.directory}: "
                                     + "; ".join(skipped))

    def _try_step(self, step_dir, step):
        """(problems, state, manifest) of one step, the same verdict on every rank."""
        ctx = self.ctx
        manifest = problem = fatal = None
        if ctx.rank == 0:
            try:
                manifest = load_manifest(step_dir, step)
            except ManifestError as exc:
                problem = str(exc)
            except CheckpointError as exc:
                fatal = str(exc)
        manifest, problem, fatal = broadcast_object((manifest, problem, fatal), ctx=ctx)
        if fatal:
            raise CheckpointError(fatal)
        if problem:
            return [problem], None, None
        problems = verify_files(step_dir, manifest, ctx, self._threads)
        if problems:
            return problems, None, None
        state = error = None
        try:
            state = read_state(step_dir, manifest, ctx.rank, ctx.size)
        except Exception as exc:  # noqa: BLE001 - shared with every rank below
            error = _error_text(exc)
        errors = allgather_object(error, ctx=ctx)
        failed = {}
        for rank, message in enumerate(errors):
            if message is not None:
                failed.setdefault(message, []).append(rank)
        problems = [f"reading failed on {format_ranks(ranks)}: {message}"
                    for message, ranks in failed.items()]
        return problems, state, manifest

    # -- lifetime ---------------------------------------------------------------------------
    def close(self):
        """Finish the save in flight (collective, like :meth:`wait`)."""
        self.wait()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        elif self._pending is not None:  # another rank may have failed: no collective
            self._pending.join()
            self._pending = None
        return False
