"""Unit tests of the checkpoint internals (serial, no MPI traffic)."""
import json
import os
import zlib

import ml_dtypes
import numpy as np
import pytest

import hpcdist
from hpcdist.checkpoint import CheckpointCorruptError, CheckpointError, Sharded
from hpcdist.checkpoint.checksum import (
    CHUNK_BYTES,
    chunk_items,
    combine_items,
    crc32_combine,
    crc32_of_items,
)
from hpcdist.checkpoint.manifest import (
    FORMAT_VERSION,
    ManifestError,
    commit_bytes,
    parse_commit,
    parse_manifest,
)
from hpcdist.checkpoint.plan import STRIPE_MIN_BYTES, describe, make_plan
from hpcdist.checkpoint.state import (
    Container,
    dtype_from_record,
    dtype_record,
    flatten_state,
    storage_dtype,
    unflatten_state,
    validate_key,
)

DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
          np.uint64, np.float16, np.float32, np.float64, np.longdouble, np.complex64,
          np.complex128, np.clongdouble, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ">f8",
          ">i4", "S5", "<U3", "M8[ns]", "m8[s]", "V6",
          [("a", "<i4"), ("b", "<f8", (2,))], [("x", [("y", ">u2")]), ("z", "S2")]]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(np.dtype(d)))
def test_dtype_records_round_trip_through_json(dtype):
    dt = np.dtype(dtype)
    record = json.loads(json.dumps(dtype_record(dt)))
    assert dtype_from_record(record) == dt
    storage, kind = storage_dtype(dt)
    assert storage.itemsize == dt.itemsize
    native = dt.kind in "biuc" or (dt.kind == "f" and dt.itemsize <= 8) or dt.kind == "S"
    native = native and dt.fields is None and dt.itemsize <= 16 and dt != np.clongdouble
    assert (kind == "native") == native, (dt, kind)


@pytest.mark.parametrize("record", [{"str": "not-a-dtype"}, {"ml_dtypes": "__import__"},
                                    {"ml_dtypes": "nope", "name": "x"},
                                    {"str": "<f8", "itemsize": 4}, {"str": "|O"}])
def test_bad_dtype_records_are_refused(record):
    with pytest.raises(ValueError, match="dtype record"):
        dtype_from_record(record)


@pytest.mark.parametrize("key", ["a/b", "..", "a..b", "", ".", "x\x00"])
def test_bad_keys_are_refused(key):
    with pytest.raises(ValueError, match="checkpoint state key"):
        validate_key(key)
    with pytest.raises(ValueError, match="checkpoint state key"):
        flatten_state({"ok": {key: 1}})


def test_non_str_keys_and_unstorable_values_are_refused():
    with pytest.raises(TypeError, match=r"key 3 in 'model' is a int"):
        flatten_state({"model": {3: 1.0}})
    with pytest.raises(TypeError, match="never pickle"):
        flatten_state({"o": np.array([object()])})
    with pytest.raises(TypeError, match=r"entry 'f' is a builtins.function"):
        flatten_state({"f": lambda: 0})
    with pytest.raises(TypeError, match="should be a dict"):
        flatten_state([1, 2])
    assert validate_key("layer.0.weight") == "layer.0.weight"


def test_sharded_validates_its_arguments():
    assert Sharded(np.zeros((2, 3)), axis=-1).axis == 1
    assert "axis=0" in repr(Sharded([1, 2]))
    with pytest.raises(ValueError, match="at least one dimension"):
        Sharded(np.float64(1.0))
    with pytest.raises(ValueError, match="out of range"):
        Sharded(np.zeros(3), axis=1)
    with pytest.raises(TypeError, match="axis"):
        Sharded(np.zeros(3), axis=0.5)


def test_flatten_unflatten_keeps_structure_and_order():
    state = {"b": {"y": 1, "x": [2, (3, {})]}, "a": (), "c": None}
    nodes = flatten_state(state)
    assert [path for path, _ in nodes] == ["b", "b/y", "b/x", "b/x/0", "b/x/1", "b/x/1/0",
                                          "b/x/1/1", "a", "c"]
    items = [(path, node.kind, None if isinstance(node, Container) else node.data)
             for path, node in nodes]
    rebuilt = unflatten_state(items)
    assert list(rebuilt) == ["b", "a", "c"] and list(rebuilt["b"]) == ["y", "x"]
    assert isinstance(rebuilt["b"]["x"], list) and isinstance(rebuilt["b"]["x"][1], tuple)
    assert rebuilt["a"] == () and rebuilt["b"]["x"][1][1] == {}


def test_crc32_combine_matches_zlib(tmp_path):
    rng = np.random.default_rng(0)
    for la, lb in [(0, 5), (5, 0), (1, 1), (1000, 77777), (3, 1 << 20)]:
        a, b = rng.bytes(la), rng.bytes(lb)
        assert crc32_combine(zlib.crc32(a), zlib.crc32(b), lb) == zlib.crc32(a + b)
    data = rng.bytes(CHUNK_BYTES + 12345)
    (tmp_path / "f").write_bytes(data)
    (tmp_path / "e").write_bytes(b"")
    items = chunk_items({"f": len(data), "e": 0})
    assert [item[2] for item in items] == [CHUNK_BYTES, 12345, 0]
    parts = crc32_of_items(str(tmp_path), items, threads=2)
    assert combine_items(parts[::-1]) == {"f": zlib.crc32(data), "e": 0}


def _descriptions(*states):
    return [describe(flatten_state(state)) for state in states]


def test_plan_offsets_stripes_and_inline():
    big = np.zeros(STRIPE_MIN_BYTES // 8 + 5)
    plan = make_plan(_descriptions(*({"x": Sharded(np.zeros((n, 2), np.float32)), "big": big,
                                      "small": np.ones(3), "s": "t"} for n in (3, 0, 2))),
                     step=4, backend="sharded")
    x = plan.entries["x"]
    assert x["shape"] == [5, 2] and x["axis"] == 0
    assert [(p["file"], p["start"], p["stop"]) for p in x["pieces"]] == [
        ("rank_00000.h5", 0, 3), ("rank_00002.h5", 3, 5)]
    assert [p["file"] for p in plan.entries["big"]["pieces"]] == [
        "rank_00000.h5", "rank_00001.h5", "rank_00002.h5"]
    assert plan.inline == {"small", "s"}
    assert plan.entries["s"]["pieces"] == [{"file": "index.h5", "dataset": "s"}]
    mpio = make_plan(_descriptions({"x": Sharded(np.zeros(3))}, {"x": Sharded(np.zeros(4))}),
                     step=1, backend="mpio")
    assert mpio.entries["x"]["pieces"] == [{"file": "index.h5", "dataset": "x", "start": 0,
                                            "stop": 7}]
    assert mpio.contributions["x"] == [(0, 0, 3), (1, 3, 7)]


@pytest.mark.parametrize("states,match", [
    (({"a": 1}, {"a": 1, "b": 2}), r"'b' is missing on rank 0"),
    (({"a": Sharded(np.zeros(2))}, {"a": np.zeros(2)}),
     r"'a' differs between ranks: it is Sharded on rank 0, a replicated array on rank 1"),
    (({"a": Sharded(np.zeros(2))}, {"a": Sharded(np.zeros(2, np.float32))}),
     r"dtype float64 on rank 0, float32 on rank 1"),
    (({"a": Sharded(np.zeros((2, 3)))}, {"a": Sharded(np.zeros((2, 4)))}),
     r"shape apart from the split axis"),
    (({"a": np.zeros(2)}, {"a": np.zeros(3)}), r"replicated .* shape \(2,\) on rank 0"),
    (({"a": [1, 2]}, {"a": [1]}), r"'a/1' is missing on rank 1"),
    (({"a": np.zeros(2)}, {"a": np.ones(2)}),
     r"^checkpoint entry 'a' is replicated \(not Sharded\) and written once, but its value "
     r"differs between ranks: CRC-32 [0-9a-f]{8} on rank 0, [0-9a-f]{8} on rank 1; save the "
     r"same value on every rank, or wrap per-rank values in Sharded"),
    (({"lr": 0.1, "name": "a"}, {"lr": 0.2, "name": "a"}), r"'lr' is replicated .* value differs"),
    (({"name": "run-a"}, {"name": "run-b"}), r"'name' is replicated .* value differs"),
])
def test_plan_refuses_states_that_differ_between_ranks(states, match):
    with pytest.raises(hpcdist.ConfigMismatchError, match=match):
        make_plan(_descriptions(*states), step=0, backend="sharded")


def _manifest(**changes):
    manifest = {"format": "hpcdist-checkpoint", "format_version": FORMAT_VERSION, "step": 3,
                "world_size": 1, "backend": "sharded", "metadata": None,
                "files": {"index.h5": {"size": 10, "crc32": "0000abcd"}},
                "entries": {"v": {"kind": "array", "dataset": "v", "dtype": dtype_record("<f8"),
                                  "storage": "native", "shape": [4], "axis": 0,
                                  "pieces": [{"file": "index.h5", "dataset": "v", "start": 0,
                                              "stop": 4}]}}}
    manifest.update(changes)
    return json.dumps(manifest).encode()


def test_manifest_checks():
    assert parse_manifest(_manifest(), 3)["entries"]["v"]["shape"] == [4]
    bad = [
        (b"{not json", "not valid JSON"),
        (_manifest(step=4), "step is 4"),
        (_manifest(files={"../x.h5": {"size": 1, "crc32": "00000000"}}), "plain file name"),
        (_manifest(files={"index.h5": {"size": 1, "crc32": "xyz"}}), "crc32"),
        (_manifest(backend="nfs"), "backend"),
        (_manifest(entries={"v/w": {"kind": "none", "dataset": "v", "pieces": []}}), "parent"),
        (_manifest(entries={"v": {"kind": "pickle"}}), "unknown kind"),
    ]
    entry = json.loads(_manifest())["entries"]["v"]
    for change in ({"pieces": [{"file": "index.h5", "dataset": "v", "start": 0, "stop": 3}]},
                   {"pieces": [{"file": "other.h5", "dataset": "v", "start": 0, "stop": 4}]},
                   {"storage": "opaque"}, {"axis": 1}, {"shape": [-1]}):
        bad.append((_manifest(entries={"v": {**entry, **change}}), "entry 'v'"))
    for raw, match in bad:
        with pytest.raises(ManifestError, match=match):
            parse_manifest(raw, 3)
    with pytest.raises(CheckpointError, match="format_version 99") as info:
        parse_manifest(_manifest(format_version=99), 3)
    assert not isinstance(info.value, CheckpointCorruptError)


def test_commit_marker_guards_the_manifest():
    raw = _manifest()
    parse_commit(commit_bytes(3, raw), raw, 3)
    with pytest.raises(ManifestError, match="SHA-256"):
        parse_commit(commit_bytes(3, raw), raw + b" ", 3)
    with pytest.raises(ManifestError, match="names step 2"):
        parse_commit(commit_bytes(2, raw), raw, 3)
    with pytest.raises(ManifestError, match="not a valid commit marker"):
        parse_commit(b"\xff", raw, 3)


def test_write_behind_flushes_while_writing_and_raises_a_failed_flush_on_exit(tmp_path,
                                                                              monkeypatch):
    from hpcdist.checkpoint import commit

    flushed = []
    monkeypatch.setattr(commit, "flush_data", lambda path: flushed.append(os.path.getsize(path)))
    path = tmp_path / "data.bin"
    with open(path, "wb") as f, commit.WriteBehind(str(path)) as behind:
        for _ in range(3):
            f.write(b"x" * 1000)
            f.flush()
            behind.written()
            behind._pending.result()  # let each flush finish before the next block
    assert flushed == [1000, 2000, 3000]

    with commit.WriteBehind(None) as behind:  # a rank that leaves the flushing to another
        behind.written()
    assert behind._flusher is None and len(flushed) == 3

    def broken(path):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(commit, "flush_data", broken)
    with pytest.raises(OSError, match="Input/output error"):
        with commit.WriteBehind(str(path)) as behind:
            behind.written()
            behind._pending.exception()  # failed in the background ...
            behind.written()  # ... and the writer is not interrupted: the exit raises


def test_flush_data_syncs_an_existing_file_and_names_a_missing_one(tmp_path):
    from hpcdist.checkpoint.commit import flush_data

    path = tmp_path / "data.bin"
    path.write_bytes(b"abc")
    flush_data(str(path))
    with pytest.raises(FileNotFoundError, match="missing.bin"):
        flush_data(str(tmp_path / "missing.bin"))


def test_importing_starts_no_mpi():
    import subprocess
    import sys

    # h5py is a hard dependency imported at the top (h5py >= 3 loads no mpi4py.MPI, even
    # when built against parallel HDF5); MPI must still be untouched
    code = ("import sys, hpcdist.checkpoint, hpcdist.data; "
            "print('h5py' in sys.modules, 'mpi4py.MPI' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ}, check=True).stdout
    assert out.split() == ["True", "False"]
