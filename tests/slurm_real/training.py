"""The training the resume and fault tests submit, and how to follow it.

``hpcdist train mlp`` on the built-in digits data set with plain SGD at a
small learning rate: it trains all ``EPOCHS`` epochs (no early stop), about
2 s at 2 ranks on an idle 2-core machine (minutes when the machine is
loaded), and checkpoints every 5 epochs (and at a stop signal). The
templates append ``--checkpoint-dir``. Its progress bar (on, no
``--quiet``) starts at the epoch it resumes from:
``MLPClassifier: 7%|... | 7/100``, which is how the tests see a resume.
"""

import re

from tests.slurm_real.cluster import checkpoint_steps

__all__ = ["EPOCHS", "TRAIN", "wait_for_checkpoint", "first_epoch_shown"]

EPOCHS = 100
TRAIN = ("hpcdist", "train", "mlp", "--dataset", "digits", "--solver", "sgd",
         "--learning-rate-init", "0.001", "--max-iter", str(EPOCHS), "--checkpoint-every", "5")


def wait_for_checkpoint(job, directory, after=0, timeout=None):
    """Wait until ``directory`` holds a complete checkpoint of a step > ``after``;
    the newest step."""
    def newer(_job):
        steps = [step for step in checkpoint_steps(directory) if step > after]
        return steps[-1] if steps else None
    kwargs = {} if timeout is None else {"timeout": timeout}
    return job.wait_until(newer, f"a checkpoint after step {after} in {directory}", **kwargs)


def first_epoch_shown(text, epochs=EPOCHS):
    """The epoch of the first progress-bar line in ``text`` (None without one)."""
    match = re.search(rf"\b(\d+)/{epochs} \[", text)
    return None if match is None else int(match.group(1))
