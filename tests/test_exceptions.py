"""The public exception classes derive from HpcdistError and the built-in a user catches."""

import ast
import builtins
import pickle
from pathlib import Path

import pytest

import hpcdist
from hpcdist import exceptions
from hpcdist.checkpoint import CheckpointCorruptError, CheckpointError

# name -> the built-in (or hpcdist) bases the error contract fixes
_BASES = {
    "HpcdistError": (Exception,),
    "CollectiveMismatchError": (hpcdist.HpcdistError, ValueError),
    "ConfigMismatchError": (hpcdist.HpcdistError, ValueError),
    "InvalidArgumentError": (hpcdist.HpcdistError, ValueError),
    "InvalidArgumentTypeError": (hpcdist.HpcdistError, TypeError),
    "MissingDatasetError": (hpcdist.HpcdistError, KeyError),
    "DataFileError": (hpcdist.HpcdistError, OSError),
    "DataFileNotFoundError": (hpcdist.DataFileError, FileNotFoundError),
    "StallError": (hpcdist.HpcdistError, TimeoutError),
    "InvalidStateError": (hpcdist.HpcdistError, RuntimeError),
    "StateDictKeyError": (hpcdist.HpcdistError, KeyError),
    "LauncherNotFoundError": (hpcdist.HpcdistError, FileNotFoundError),
    "RemoteError": (hpcdist.HpcdistError, RuntimeError),
}
# built-ins that are no user error: abstract methods, exit codes, the attribute protocol
# of __getattr__, and assertions of invariants (a bug of hpcdist's when they fire)
_BUILT_INS_ALLOWED = {"NotImplementedError", "SystemExit", "AttributeError", "AssertionError"}
_PACKAGE = Path(hpcdist.__file__).parent


@pytest.mark.parametrize("name", sorted(_BASES))
def test_each_class_is_public_at_the_top_level_with_its_bases(name):
    cls = getattr(hpcdist, name)
    assert cls is getattr(exceptions, name)
    assert name in hpcdist.__all__ and name in exceptions.__all__
    for base in _BASES[name]:
        assert issubclass(cls, base), (name, base)
    assert issubclass(cls, Exception)


@pytest.mark.parametrize("name", sorted(_BASES))
def test_the_message_reads_as_written(name):
    message = "n_clusters=-3 should be an integer >= 1"
    error = getattr(hpcdist, name)(message)
    assert str(error) == message


def test_checkpoint_errors_are_hpcdist_errors():
    assert issubclass(CheckpointError, hpcdist.HpcdistError)
    assert issubclass(CheckpointCorruptError, CheckpointError)


def test_a_missing_dataset_is_caught_as_a_key_error():
    with pytest.raises(KeyError, match="'labels' not in data.h5"):
        raise hpcdist.MissingDatasetError("'labels' not in data.h5; it has: X, y")


def _raised_built_ins(path):
    """(line, name) of every ``raise BuiltinError(...)`` in one source file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Raise) or node.exc is None:
            continue
        exc = node.exc
        # raise X(...), and raise helper(X(...)) as in mark_raised_on_every_rank(ValueError(...))
        calls = [exc] + ([exc.args[0]] if isinstance(exc, ast.Call) and exc.args else [])
        for call in calls:
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name):
                name = call.func.id
                if (isinstance(getattr(builtins, name, None), type)
                        and issubclass(getattr(builtins, name), BaseException)
                        and name not in _BUILT_INS_ALLOWED):
                    found.append((node.lineno, name))
    return found


def test_hpcdist_raises_no_bare_built_in_exception():
    """Every error raised on purpose is a public HpcdistError subclass."""
    offenders = [f"{path.relative_to(_PACKAGE.parent)}:{line}: raise {name}"
                 for path in sorted(_PACKAGE.rglob("*.py"))
                 for line, name in _raised_built_ins(path)]
    assert not offenders, "raise hpcdist's own classes instead:\n" + "\n".join(offenders)


def test_new_classes_keep_the_message_as_written_for_key_errors():
    with pytest.raises(KeyError, match="missing keys"):
        raise hpcdist.StateDictKeyError("load_state_dict: missing keys ['w']")
    assert str(hpcdist.StateDictKeyError("a 'b' c")) == "a 'b' c"


def test_remote_errors_pickle_with_what_the_other_rank_raised():
    pytest.importorskip("distributed")
    from hpcdist.dask import DaskPhaseError
    from hpcdist.rpc import RpcError, RpcTimeoutError
    for cls in (hpcdist.RemoteError, DaskPhaseError, RpcError, RpcTimeoutError):
        error = cls("rank 1 raised ValueError: bad", remote_rank=1, remote_type="ValueError",
                    remote_message="bad", remote_traceback="Traceback ...")
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is cls and isinstance(copy, hpcdist.RemoteError)
        assert str(copy) == str(error)
        assert (copy.remote_rank, copy.remote_type, copy.remote_message,
                copy.remote_traceback) == (1, "ValueError", "bad", "Traceback ...")
