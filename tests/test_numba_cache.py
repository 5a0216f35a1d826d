"""Where compiled kernels are cached, and processes sharing the cache compile a kernel once."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import hpcdist
from tests.helpers import subprocess_env

_KERNEL = textwrap.dedent("""
    import numpy as np
    from hpcdist._numba import JIT_PARALLEL, njit, prange

    @njit(**JIT_PARALLEL)
    def scaled_sum(x, factor):
        total = 0.0
        for i in prange(x.shape[0]):
            total += np.sin(x[i]) * factor + np.cos(x[i]) ** 2
        return total
""")

# waits for the go file, calls the kernel with (dtype), prints what Numba's cache did
_CALLER = textwrap.dedent("""
    import json, os, sys, time
    import numpy as np
    import kernel
    go = sys.argv[1]
    while go and not os.path.exists(go):
        time.sleep(0.01)
    x = np.arange(10, dtype=sys.argv[2])
    value = kernel.scaled_sum(x, x.dtype.type(2))
    stats = kernel.scaled_sum.stats
    print(json.dumps({"value": float(value), "hits": sum(stats.cache_hits.values()),
                      "misses": sum(stats.cache_misses.values())}))
""")


def _python(code, env, *args, cwd=None):
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(process):
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture
def kernel_env(tmp_path):
    (tmp_path / "kernel.py").write_text(_KERNEL)
    env = subprocess_env(NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    return env


def test_default_cache_is_per_user_and_exported_to_child_processes(tmp_path):
    env = subprocess_env(XDG_CACHE_HOME=str(tmp_path / "xdg"))
    env.pop("NUMBA_CACHE_DIR", None)
    code = ("import json, os, hpcdist._numba as n\n"
            "from hpcdist.kernels import casts\n"
            "print(json.dumps([n.cache_dir(), os.environ['NUMBA_CACHE_DIR'],"
            " casts._narrow_kernel._cache.cache_path]))")
    folder, exported, kernel_path = _result(_python(code, env))
    expected = str(tmp_path / "xdg" / "hpcdist" / "numba")
    assert folder == exported == expected
    assert kernel_path.startswith(expected + os.sep)  # not in the installation's folders


def test_numba_cache_dir_set_by_the_user_is_kept(tmp_path):
    env = subprocess_env(NUMBA_CACHE_DIR=str(tmp_path / "mine"), XDG_CACHE_HOME=str(tmp_path))
    code = "import json, hpcdist._numba as n; print(json.dumps(n.cache_dir()))"
    assert _result(_python(code, env)) == str(tmp_path / "mine")
    assert not (tmp_path / "hpcdist").exists()


def test_unwritable_default_leaves_numbas_own_choice(tmp_path):
    (tmp_path / "a_file").write_text("")
    env = subprocess_env(XDG_CACHE_HOME=str(tmp_path / "a_file"))  # no folder can go there
    env.pop("NUMBA_CACHE_DIR", None)
    code = ("import json, os, hpcdist._numba as n;"
            " print(json.dumps([n.cache_dir(), 'NUMBA_CACHE_DIR' in os.environ]))")
    assert _result(_python(code, env)) == [None, False]


def test_two_processes_compile_a_kernel_once_and_a_third_loads_it(kernel_env, tmp_path):
    go = tmp_path / "go"
    first, second = (_python(_CALLER, kernel_env, str(go), "float64") for _ in range(2))
    go.write_text("")
    results = [_result(first), _result(second)]
    assert results[0]["value"] == results[1]["value"]
    # one compiled while the other waited, then loaded what it saved
    assert sorted((r["misses"], r["hits"]) for r in results) == [(0, 1), (1, 0)]
    third = _result(_python(_CALLER, kernel_env, "", "float64"))
    assert (third["misses"], third["hits"]) == (0, 1) and third["value"] == results[0]["value"]


def test_two_signatures_saved_at_once_both_load_back(kernel_env, tmp_path):
    go = tmp_path / "go"
    processes = {dtype: _python(_CALLER, kernel_env, str(go), dtype)
                 for dtype in ("float64", "float32")}
    go.write_text("")
    compiled = {dtype: _result(p) for dtype, p in processes.items()}
    for dtype, result in compiled.items():
        again = _result(_python(_CALLER, kernel_env, "", dtype))
        assert (again["misses"], again["hits"]) == (0, 1)
        assert again["value"] == result["value"]  # its own signature's code, not the other's
    cache = kernel_env["NUMBA_CACHE_DIR"]
    leftovers = [name for _, _, names in os.walk(cache) for name in names if ".tmp." in name]
    assert leftovers == []


# a kernel of hpcdist's, then what Numba's cache did for it
_HPCDIST_KERNEL = """
import json, sys
# the copy on PYTHONPATH, not an editable installation's finder of the checkout
sys.meta_path = [f for f in sys.meta_path if "editable" not in getattr(f, "__module__", "")]
import numpy as np
from hpcdist.kernels import casts, from_half, to_half
from_half(to_half(np.ones(8, np.float32), "bfloat16"))
stats = casts._narrow_kernel.stats
print(json.dumps([sum(stats.cache_misses.values()), sum(stats.cache_hits.values()),
                  casts._narrow_kernel._cache.cache_path, casts.__file__]))
"""


def _immutable(folders, on):
    flag = "+i" if on else "-i"
    return subprocess.run(["chattr", flag, *map(str, folders)], capture_output=True).returncode


def test_read_only_installation_caches_in_the_per_user_folder(tmp_path):
    """An installation nobody can write to (even root: immutable folders) compiles once
    into the per-user cache, and the next process loads from there."""
    copy = tmp_path / "site"
    shutil.copytree(Path(hpcdist.__file__).parent, copy / "hpcdist",
                    ignore=shutil.ignore_patterns("__pycache__"))
    folders = [copy] + [path for path in copy.rglob("*") if path.is_dir()]
    if shutil.which("chattr") is None or _immutable(folders, True) != 0:
        pytest.skip("cannot make folders immutable here (chattr +i needs root)")
    try:
        assert not os.access(copy / "hpcdist" / "kernels", os.W_OK) or \
            _python("open('x', 'w')", subprocess_env(), cwd=copy / "hpcdist").wait() != 0
        env = subprocess_env(XDG_CACHE_HOME=str(tmp_path / "xdg"))
        env.pop("NUMBA_CACHE_DIR", None)
        env["PYTHONPATH"] = os.pathsep.join([str(copy), env["PYTHONPATH"]])
        first = _result(_python(_HPCDIST_KERNEL, env, cwd=tmp_path))  # not the checkout's
        second = _result(_python(_HPCDIST_KERNEL, env, cwd=tmp_path))
    finally:
        _immutable(folders, False)
    assert first[3].startswith(str(copy) + os.sep)  # the read-only copy ran
    assert first[0] > 0 and second[:2] == [0, 1]
    assert first[2] == second[2]
    assert first[2].startswith(str(tmp_path / "xdg" / "hpcdist" / "numba") + os.sep)
