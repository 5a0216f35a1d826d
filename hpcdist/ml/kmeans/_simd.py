"""Register-blocked K-means building blocks, written as LLVM vector IR (Numba intrinsics).

Numba's auto-vectoriser cannot keep a GEMM micro-kernel's accumulators in
registers, so the hot loop of the K-means kernels is emitted directly as LLVM
IR with explicit vector types through :func:`numba.extending.intrinsic`. The
intrinsics are inlined into the calling ``@njit`` function (no call, no
compiled extension) and cached with it.

:func:`nearest_tile` is a fused distance + argmin micro-kernel: for
``TILE_ROWS`` rows at once it accumulates ``||c||^2 + x . (-2 c)`` for a
block of centers in ``TILE_ROWS x vectors`` vector registers (one broadcast
of ``x[p]`` and one fused multiply-add per register and feature, the classic
sgemm register tile) and reduces the block to each row's minimum and its
first center before the next block. The ``(rows, centers)`` distance matrix
is never stored.

:func:`lloyd_tile` is the same search followed by the Lloyd update of each
row while it is in L1: its label, its cluster's count, ``sums[nearest] +=
x`` in float64 vector by vector, and its smallest ``||c||^2 - 2 x.c``. Both
prefetch the rows a few tiles ahead.

The vector width and the register budget come from the CPU Numba compiles
for (``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES``, else the host): 512-bit
vectors and 32 registers with AVX-512, 256-bit and 16 with AVX, else 128-bit
and 16. Another CPU gets correct but slower code: LLVM splits the vectors.
Results do not depend on the width: every row's distances are the same
sequence of fused multiply-adds over the features.

Names
-----
TILE_ROWS : int
    Rows per tile.
CENTER_PADDING : int
    The padded center count of the tiles is a multiple of this.
PREFETCH_ROWS : int
nearest_tile(X, row0, neg2t, norms, nearest, out0)
lloyd_tile(X, row0, stop, neg2t, norms, labels, sums, counts, best, out0) -> n_changed
"""
import llvmlite.binding as llvm
from llvmlite import ir
from numba import types
from numba.core import cgutils, config
from numba.core.errors import TypingError
from numba.extending import intrinsic

__all__ = ["TILE_ROWS", "CENTER_PADDING", "PREFETCH_ROWS", "nearest_tile", "lloyd_tile"]

#: Rows of one register tile: 6 rows x 4 vectors of centers = 24 accumulators (+4 center
#: vectors and a broadcast) fill AVX-512's 32 registers; 6 x 2 fill AVX's 16.
TILE_ROWS = 6
#: Padded center count multiple: a whole number of vectors at every width (16 float32).
CENTER_PADDING = 16

#: Rows ahead of the current tile that the tiles prefetch (four tiles): far
#: enough ahead for the memory to answer, near enough to stay in cache.
PREFETCH_ROWS = 4 * TILE_ROWS

_I1, _I32, _I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)


def _target_features():
    """The CPU features Numba compiles for: ``NUMBA_CPU_FEATURES``, else the host's
    (none for a named generic ``NUMBA_CPU_NAME``, which portable caches use)."""
    if config.CPU_FEATURES:
        return {f[1:] for f in config.CPU_FEATURES.split(",") if f.startswith("+")}
    if config.CPU_NAME and config.CPU_NAME != "host":
        return set()
    return {name for name, on in llvm.get_host_cpu_features().items() if on}


def _vector_plan(features):
    """``(vector_bytes, center_vectors_per_block)`` for a feature set."""
    if "avx512f" in features:
        return 64, 4
    if "avx" in features:
        return 32, 2
    return 16, 2


_VECTOR_BYTES, _BLOCK_VECTORS = _vector_plan(_target_features())


def _float_arrays(*arrays):
    """Raise a TypingError unless every array is a C-contiguous float32/float64 array."""
    for array in arrays:
        if not (isinstance(array, types.Array) and array.layout == "C"
                and array.dtype in (types.float32, types.float64)):
            raise TypingError(f"expected a C-contiguous float32/float64 array, got {array}")


def _splat(builder, scalar, lanes):
    """A vector of ``lanes`` copies of ``scalar``."""
    vty = ir.VectorType(scalar.type, lanes)
    first = builder.insert_element(ir.Constant(vty, ir.Undefined), scalar, _I32(0))
    return builder.shuffle_vector(first, ir.Constant(vty, ir.Undefined),
                                  ir.Constant(ir.VectorType(_I32, lanes), [_I32(0)] * lanes))


def _element_bytes(element):
    return 4 if isinstance(element, ir.FloatType) else 8


def _load_vector(builder, pointer, lanes):
    """A load of ``lanes`` elements at ``pointer`` (aligned to one element only)."""
    vty = ir.VectorType(pointer.type.pointee, lanes)
    return builder.load(builder.bitcast(pointer, vty.as_pointer()),
                        align=_element_bytes(pointer.type.pointee))


def _smaller(builder, a, b):
    """Lane-wise ``a if a < b else b`` (``b`` on ties and NaN, like a sequential ``<`` scan)."""
    return builder.select(builder.fcmp_ordered("<", a, b), a, b)


def _horizontal(builder, vector, combine):
    """Fold a vector's lanes with ``combine`` in log2(lanes) shuffles; lane 0 has the result."""
    lanes = vector.type.count
    undef = ir.Constant(vector.type, ir.Undefined)
    width = lanes
    while width > 1:
        width //= 2
        order = [_I32(i + width) if i < width else _I32(i) for i in range(lanes)]
        moved = builder.shuffle_vector(vector, undef, ir.Constant(ir.VectorType(_I32, lanes),
                                                                  order))
        vector = combine(builder, moved, vector)
    return builder.extract_element(vector, _I32(0))


def _intrinsic_function(builder, name, return_type, argument_types):
    return cgutils.get_or_insert_function(builder.module,
                                          ir.FunctionType(return_type, argument_types), name)


def _vector_suffix(vty):
    return f"v{vty.count}{'f32' if isinstance(vty.element, ir.FloatType) else 'f64'}"


def _first_equal_lane(builder, vectors, value):
    """Index (i32) of the first lane over ``vectors`` (concatenated) equal to ``value``."""
    lanes = vectors[0].type.count
    bits = ir.IntType(lanes * len(vectors))
    target = _splat(builder, value, lanes)
    mask = None
    for v, vector in enumerate(vectors):
        equal = builder.bitcast(builder.fcmp_ordered("==", vector, target), ir.IntType(lanes))
        part = builder.zext(equal, bits) if bits.width > lanes else equal
        if v:
            part = builder.shl(part, ir.Constant(bits, v * lanes))
            mask = builder.or_(mask, part)
        else:
            mask = part
    cttz = _intrinsic_function(builder, f"llvm.cttz.i{bits.width}", bits, [bits, _I1])
    lane = builder.call(cttz, [mask, _I1(1)])
    if bits.width > 32:
        return builder.trunc(lane, _I32)
    return builder.zext(lane, _I32) if bits.width < 32 else lane


class _NearestTile:
    """Emits the register-blocked nearest-center search of one tile (inlined IR).

    After :meth:`emit`, ``best_value[i]`` and ``best_index[i]`` (allocas)
    hold row ``i``'s smallest ``||c||^2 - 2 x.c`` (X's precision) and its
    first center, and ``rows[i]`` points at the row (rows past the end of
    ``X`` repeat its last row, so there is no tail code).
    """

    def __init__(self, context, builder, X, row0, neg2t, norms):
        """``X``, ``neg2t``, ``norms``: ``(numba type, LLVM value)`` pairs."""
        self.builder = builder
        x_array = context.make_array(X[0])(context, builder, X[1])
        t_array = context.make_array(neg2t[0])(context, builder, neg2t[1])
        self.neg2t = t_array.data
        self.norms = context.make_array(norms[0])(context, builder, norms[1]).data
        n_rows, self.n_features = cgutils.unpack_tuple(builder, x_array.shape, 2)
        self.padded = cgutils.unpack_tuple(builder, t_array.shape, 2)[1]
        self.element = context.get_value_type(X[0].dtype)
        self.lanes = _VECTOR_BYTES // _element_bytes(self.element)
        self.vty = ir.VectorType(self.element, self.lanes)
        self.fmuladd = _intrinsic_function(builder, f"llvm.fmuladd.{_vector_suffix(self.vty)}",
                                           self.vty, [self.vty] * 3)
        last = builder.sub(n_rows, _I64(1))
        self.rows = []
        for i in range(TILE_ROWS):
            row = builder.add(row0, _I64(i))
            row = builder.select(builder.icmp_signed("<", row, last), row, last)
            self.rows.append(builder.gep(x_array.data, [builder.mul(row, self.n_features)]))
        self._prefetch(x_array.data, row0, last)
        inf = ir.Constant(self.element, float("inf"))
        self.best_value = [cgutils.alloca_once_value(builder, inf) for _ in range(TILE_ROWS)]
        self.best_index = [cgutils.alloca_once_value(builder, _I32(0))
                           for _ in range(TILE_ROWS)]
        self.accumulators = [[cgutils.alloca_once(builder, self.vty)
                              for _ in range(_BLOCK_VECTORS)] for _ in range(TILE_ROWS)]

    def _prefetch(self, data, row0, last):
        """Prefetch the rows of the tile ``PREFETCH_ROWS`` rows ahead, line by line
        (the hardware prefetcher alone leaves the loop waiting for memory)."""
        builder = self.builder
        ahead = builder.add(row0, _I64(PREFETCH_ROWS))
        ahead = builder.select(builder.icmp_signed("<", ahead, last), ahead, last)
        byte = ir.IntType(8).as_pointer()
        start = builder.bitcast(builder.gep(data, [builder.mul(ahead, self.n_features)]), byte)
        size = builder.mul(self.n_features, _I64(TILE_ROWS * _element_bytes(self.element)))
        prefetch = _intrinsic_function(builder, "llvm.prefetch.p0i8", ir.VoidType(),
                                       [byte, _I32, _I32, _I32])
        with cgutils.for_range_slice(builder, _I64(0), size, _I64(64)) as (offset, _):
            # read, keep in all cache levels, data cache
            builder.call(prefetch, [builder.gep(start, [offset]), _I32(0), _I32(3), _I32(1)])

    def emit(self):
        """The search over all (padded) centers: whole blocks of vectors, then one block
        of the 1 to ``_BLOCK_VECTORS - 1`` vectors left (a pass over the features each)."""
        builder = self.builder
        per_block = _BLOCK_VECTORS * self.lanes
        full = builder.udiv(self.padded, _I64(per_block))
        with cgutils.for_range(builder, full) as loop:
            self._block(builder.mul(loop.index, _I64(per_block)), _BLOCK_VECTORS)
        done = builder.mul(full, _I64(per_block))
        rest = builder.udiv(builder.sub(self.padded, done), _I64(self.lanes))
        for n_vectors in range(1, _BLOCK_VECTORS):
            with builder.if_then(builder.icmp_unsigned("==", rest, _I64(n_vectors))):
                self._block(done, n_vectors)

    def _block(self, first, n_vectors):
        """Centers ``first:first + n_vectors * lanes`` for every row of the tile."""
        builder = self.builder
        # the accumulators start at ||c||^2: no add per row and vector after the loop
        norms = [_load_vector(builder, builder.gep(self.norms, [builder.add(
            first, _I64(v * self.lanes))]), self.lanes) for v in range(n_vectors)]
        accumulators = [row[:n_vectors] for row in self.accumulators]
        for row in accumulators:
            for slot, norm in zip(row, norms):
                builder.store(norm, slot)
        with cgutils.for_range(builder, self.n_features) as loop:
            feature = loop.index
            line = builder.gep(self.neg2t, [builder.add(builder.mul(feature, self.padded), first)])
            centers = [_load_vector(builder, builder.gep(line, [_I64(v * self.lanes)]), self.lanes)
                       for v in range(n_vectors)]
            for i, row in enumerate(accumulators):
                x = _splat(builder, builder.load(builder.gep(self.rows[i], [feature])), self.lanes)
                for slot, center in zip(row, centers):
                    builder.store(builder.call(self.fmuladd, [x, center, builder.load(slot)]),
                                  slot)
        first32 = builder.trunc(first, _I32)
        for i, row in enumerate(accumulators):
            distances = [builder.load(slot) for slot in row]
            smallest = distances[0]
            for vector in distances[1:]:
                smallest = _smaller(builder, vector, smallest)
            value = _horizontal(builder, smallest, _smaller)
            index = builder.add(first32, _first_equal_lane(builder, distances, value))
            previous = builder.load(self.best_value[i])
            better = builder.fcmp_ordered("<", value, previous)
            builder.store(builder.select(better, value, previous), self.best_value[i])
            builder.store(builder.select(better, index, builder.load(self.best_index[i])),
                          self.best_index[i])


def _check_tile_types(X, neg2t, norms, labels, labels_name):
    _float_arrays(X, neg2t, norms)
    if not (X.dtype == neg2t.dtype == norms.dtype):
        raise TypingError("X, neg2t and norms need one dtype")
    if not (isinstance(labels, types.Array) and labels.dtype == types.int32):
        raise TypingError(f"{labels_name} must be an int32 array, got {labels}")


def _element_pointer(context, builder, array_type, value, index):
    """Pointer to element ``index`` of a 1-D array."""
    return builder.gep(context.make_array(array_type)(context, builder, value).data, [index])


@intrinsic
def nearest_tile(typingctx, X, row0, neg2t, norms, nearest, out0):
    """Nearest center of rows ``row0 : row0 + TILE_ROWS`` of ``X`` (register-blocked).

    For each row (rows past the end of ``X`` repeat its last row),
    ``nearest[out0 + i]`` receives the first ``j`` reaching
    ``min_j norms[j] + X[row0 + i] . neg2t[:, j]`` (ties go to the lowest
    center; a row's result does not depend on the tile it falls in).

    Parameters
    ----------
    X : ndarray of shape (n, d), float32 or float64, C-contiguous, n >= 1
    row0 : int64
    neg2t : ndarray of shape (d, k_padded), X's dtype, C-contiguous
        ``-2 * centers.T``, zero columns up to ``k_padded``, a multiple of
        ``CENTER_PADDING``.
    norms : ndarray of shape (k_padded,), X's dtype
        ``||c||^2``, ``+inf`` for the padding columns (never nearest).
    nearest : ndarray of int32, at least ``out0 + TILE_ROWS`` long
    out0 : int64
    """
    _check_tile_types(X, neg2t, norms, nearest, "nearest")
    signature = types.void(X, types.int64, neg2t, norms, nearest, types.int64)

    def codegen(context, builder, sig, args):
        tile = _NearestTile(context, builder, (sig.args[0], args[0]), args[1],
                            (sig.args[2], args[2]), (sig.args[3], args[3]))
        tile.emit()
        for i in range(TILE_ROWS):
            out = _element_pointer(context, builder, sig.args[4], args[4],
                                   builder.add(args[5], _I64(i)))
            builder.store(builder.load(tile.best_index[i]), out)
        return context.get_dummy_value()

    return signature, codegen


@intrinsic
def lloyd_tile(typingctx, X, row0, stop, neg2t, norms, labels, sums, counts, best, out0):
    """:func:`nearest_tile` and, for the tile's rows before ``stop``, the Lloyd update.

    For row ``r = row0 + i < stop`` with nearest center ``j``: ``labels[r] =
    j``, ``sums[j, :d] += X[r]`` (float64), ``counts[j] += 1`` and ``best[out0
    + i] = ||c_j||^2 - 2 X[r].c_j`` (widened to float64). Returns how many of
    these rows changed label.

    Parameters
    ----------
    X, row0, neg2t, norms, out0
        As in :func:`nearest_tile`.
    stop : int64
        Rows from ``stop`` on are searched but not updated.
    labels : ndarray of int32, shape (n,)
    sums : ndarray of float64, shape (k, >= d), C-contiguous
    counts : ndarray of int64, shape (k,)
    best : ndarray of float64, at least ``out0 + TILE_ROWS`` long
    """
    _check_tile_types(X, neg2t, norms, labels, "labels")
    for name, array, dtype, ndim in (("sums", sums, types.float64, 2),
                                     ("counts", counts, types.int64, 1),
                                     ("best", best, types.float64, 1)):
        if not (isinstance(array, types.Array) and array.dtype == dtype and array.ndim == ndim
                and array.layout == "C"):
            raise TypingError(f"lloyd_tile: {name} must be a C-contiguous {ndim}-D {dtype} "
                              f"array, got {array}")
    signature = types.int64(X, types.int64, types.int64, neg2t, norms, labels, sums, counts,
                            best, types.int64)

    def codegen(context, builder, sig, args):
        X_arg, row0, stop, neg2t_arg, norms_arg, labels_arg, sums_arg, counts_arg, best_arg, \
            out0 = args
        tile = _NearestTile(context, builder, (sig.args[0], X_arg), row0,
                            (sig.args[3], neg2t_arg), (sig.args[4], norms_arg))
        tile.emit()
        sums_array = context.make_array(sig.args[6])(context, builder, sums_arg)
        stride = cgutils.unpack_tuple(builder, sums_array.shape, 2)[1]
        changed = cgutils.alloca_once_value(builder, _I64(0))
        for i in range(TILE_ROWS):
            row = builder.add(row0, _I64(i))
            with builder.if_then(builder.icmp_signed("<", row, stop), likely=True):
                j = builder.load(tile.best_index[i])
                j64 = builder.sext(j, _I64)
                label = _element_pointer(context, builder, sig.args[5], labels_arg, row)
                moved = builder.zext(builder.icmp_signed("!=", builder.load(label), j), _I64)
                builder.store(builder.add(builder.load(changed), moved), changed)
                builder.store(j, label)
                count = _element_pointer(context, builder, sig.args[7], counts_arg, j64)
                builder.store(builder.add(builder.load(count), _I64(1)), count)
                _emit_add_row(builder, builder.gep(sums_array.data, [builder.mul(j64, stride)]),
                              tile.rows[i], tile.n_features, tile.element, tile.lanes)
                distance = builder.load(tile.best_value[i])
                if tile.element != ir.DoubleType():
                    distance = builder.fpext(distance, ir.DoubleType())
                builder.store(distance, _element_pointer(context, builder, sig.args[8], best_arg,
                                                         builder.add(out0, _I64(i))))
        return builder.load(changed)

    return signature, codegen


def _emit_add_row(builder, sum_line, x_line, n_features, element, lanes):
    """IR: ``sum_line[:d] += x_line[:d]``, widened to float64 vector by vector."""
    double = ir.DoubleType()
    wide = ir.VectorType(double, lanes)
    whole = builder.mul(builder.udiv(n_features, _I64(lanes)), _I64(lanes))
    with cgutils.for_range_slice(builder, _I64(0), whole, _I64(lanes)) as (f, _):
        x = _load_vector(builder, builder.gep(x_line, [f]), lanes)
        target = builder.bitcast(builder.gep(sum_line, [f]), wide.as_pointer())
        widened = builder.fpext(x, wide) if element != double else x
        builder.store(builder.fadd(builder.load(target, align=8), widened), target, align=8)
    with cgutils.for_range_slice(builder, whole, n_features, _I64(1)) as (f, _):
        x = builder.load(builder.gep(x_line, [f]))
        target = builder.gep(sum_line, [f])
        widened = builder.fpext(x, double) if element != double else x
        builder.store(builder.fadd(builder.load(target), widened), target)
