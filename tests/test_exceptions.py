"""The public exception classes derive from HpcdistError and the built-in a user catches."""

import pytest

import hpcdist
from hpcdist import exceptions
from hpcdist.checkpoint import CheckpointCorruptError, CheckpointError

# name -> the built-in (or hpcdist) bases API.md section 3 fixes
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
}


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
