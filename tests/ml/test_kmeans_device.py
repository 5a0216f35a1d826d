"""KMeans on device arrays: the CuPy code paths, run on the CPU through a fake ``cupy``.

The fake module is NumPy with a ``cupy.ndarray`` subclass (so that
``hpcdist.kernels._arrays.is_cupy`` sees a device array), ``asnumpy`` and
``cupyx.scatter_add``: it checks the logic of the device paths (where data
stay, which results come back to the host), not CUDA. The real thing runs in
the ``gpu``-marked test where CuPy is installed.
"""
import sys
import types

import numpy as np
import pytest
from sklearn.cluster import KMeans as SKLearnKMeans
from sklearn.datasets import make_blobs as sklearn_blobs

import hpcdist
from hpcdist.ml import KMeans
from tests.helpers import all_ranks, assert_on_all_ranks, expect_error, mpi_twin


class _DeviceArray(np.ndarray):
    """Host memory posing as a CuPy array (``type(x).__module__ == "cupy"``)."""


_DeviceArray.__module__ = "cupy"


def _to_device(value):
    if isinstance(value, np.ndarray) and not isinstance(value, _DeviceArray):
        return value.view(_DeviceArray)
    return value


def _wrap(function):
    def wrapped(*args, **kwargs):
        return _to_device(function(*args, **kwargs))
    return wrapped


def _fake_cupy():
    cupy = types.ModuleType("cupy")
    cupy.ndarray = _DeviceArray
    cupy.asarray = lambda a, dtype=None: _to_device(np.array(a, dtype=dtype, copy=None))
    cupy.asnumpy = lambda a: np.asarray(a).view(np.ndarray)
    cupy.ascontiguousarray = _wrap(np.ascontiguousarray)
    cupy.__getattr__ = lambda name: (getattr(np, name) if isinstance(getattr(np, name), type)
                                     or not callable(getattr(np, name))
                                     else _wrap(getattr(np, name)))
    cupyx = types.ModuleType("cupyx")
    cupyx.scatter_add = lambda a, indices, values: np.add.at(a, np.asarray(indices), values)
    return cupy, cupyx


@pytest.fixture
def cupy(monkeypatch, ctx):  # ctx first: hpcdist.init() probes for the real CuPy
    fake, fake_x = _fake_cupy()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setitem(sys.modules, "cupyx", fake_x)
    return fake


def _data(n=900, seed=0):
    X, _ = sklearn_blobs(n, 4, centers=5, cluster_std=2.0, random_state=seed)
    bounds = np.linspace(0, n, hpcdist.get_world_size() + 1).astype(int)
    rank = hpcdist.get_rank()
    return X, X[bounds[rank]:bounds[rank + 1]], slice(bounds[rank], bounds[rank + 1])


def test_fit_on_device_arrays_matches_sklearn(cupy):
    X, X_local, rows = _data()
    reference = SKLearnKMeans(5, init=X[:5], n_init=1, algorithm="lloyd").fit(X)
    km = KMeans(5, init=X[:5]).fit(cupy.asarray(X_local))
    with all_ranks("device fit"):
        assert type(km.cluster_centers_) is np.ndarray  # the model lives on the host
        assert type(km.labels_) is cupy.ndarray  # the labels stay with the rows
        np.testing.assert_allclose(km.cluster_centers_, reference.cluster_centers_, rtol=1e-9)
        assert km.n_iter_ == reference.n_iter_
        assert abs(km.inertia_ - reference.inertia_) <= 1e-9 * reference.inertia_
        np.testing.assert_array_equal(cupy.asnumpy(km.labels_), reference.labels_[rows])
        labels = km.predict(cupy.asarray(X_local))
        assert type(labels) is cupy.ndarray
        np.testing.assert_array_equal(cupy.asnumpy(labels), reference.labels_[rows])
        distances = km.transform(cupy.asarray(X_local))
        np.testing.assert_allclose(cupy.asnumpy(distances), reference.transform(X[rows]),
                                   rtol=1e-6, atol=1e-6)
    score = km.score(cupy.asarray(X_local))
    assert_on_all_ranks(abs(score + reference.inertia_) <= 1e-9 * reference.inertia_,
                        f"score {score} != {-reference.inertia_}")


@pytest.mark.parametrize("init", ["k-means++", "k-means||", "random"])
def test_device_initializations_match_the_host_ones(cupy, init):
    _, X_local, _ = _data(seed=1)
    host = KMeans(5, init=init, random_state=3).fit(X_local)
    device = KMeans(5, init=init, random_state=3).fit(cupy.asarray(X_local))
    with all_ranks(init):
        np.testing.assert_allclose(device.cluster_centers_, host.cluster_centers_, rtol=1e-9)
        assert device.n_iter_ == host.n_iter_


def test_device_empty_cluster_relocation_and_train_epoch(cupy):
    X, X_local, _ = _data(seed=2)
    init = X[:5].copy()
    init[1] = 500.0
    reference = SKLearnKMeans(5, init=init, n_init=1, algorithm="lloyd").fit(X)
    km = KMeans(5, init=init).fit(cupy.asarray(X_local))
    trainer = KMeans(5, init=init)
    host_trainer = KMeans(5, init=init)
    for _ in range(3):
        trainer.train_epoch(cupy.asarray(X_local))
        host_trainer.train_epoch(X_local)
    with all_ranks():
        np.testing.assert_allclose(km.cluster_centers_, reference.cluster_centers_, rtol=1e-9)
        np.testing.assert_allclose(trainer.cluster_centers_, host_trainer.cluster_centers_,
                                   rtol=1e-9)


def test_device_bad_input(cupy):
    _, X_local, _ = _data()
    bad = cupy.asarray(X_local.copy())
    if hpcdist.get_rank() == 0:
        bad[0, 0] = np.nan
    expect_error(ValueError, KMeans(5).fit, bad, match="NaN")
    expect_error(ValueError, KMeans(5).fit, cupy.asarray(X_local + 1j), match="Complex")
    expect_error(ValueError, KMeans(5).fit, cupy.asarray(X_local[:, 0]), match="2D")


test_fit_on_device_arrays_matches_sklearn_mpi = mpi_twin(
    test_fit_on_device_arrays_matches_sklearn)
test_device_initializations_match_the_host_ones_mpi = mpi_twin(
    test_device_initializations_match_the_host_ones)
test_device_empty_cluster_relocation_and_train_epoch_mpi = mpi_twin(
    test_device_empty_cluster_relocation_and_train_epoch)
test_device_bad_input_mpi = mpi_twin(test_device_bad_input)
