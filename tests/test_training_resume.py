"""A training killed after an epoch resumes from that epoch and ends with the same weights (issue 16)."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from pipeline.app.stores.checkpoint import state_bytes
from pipeline.encoders import VaDEEncoder

TINY = dict(n_clusters=3, latent_dim=4, hidden_dims=(16, 16), pretrain_epochs=2, epochs=5, lr=2e-3, batch_size=32,
            progress=False, device="cpu")


class Killed(Exception):
    pass


@pytest.fixture(scope="module")
def X():
    X, y = load_digits(return_X_y=True)
    return X[np.isin(y, [0, 1, 6])][:150]


def on_disk(state: dict) -> dict:
    """What an epoch checkpoint file gives back (torch.save -> torch.load(weights_only=True))."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize("kill_after, augment", [(1, {}), (3, {}),
                                                (3, dict(augment_shift=1, augment_rotation=10, augment_elbo=True))])
def test_resumed_training_equals_uninterrupted(X, kill_after, augment):
    torch.set_num_threads(1)
    params = {**TINY, **augment}  # augmentation draws from the checkpointed generator (issue 26)
    reference = VaDEEncoder(**params).fit(X)
    saved = {}

    def checkpoint_then_die(encoder):
        saved["state"] = on_disk(encoder.checkpoint_state())
        if encoder.epoch_ == kill_after:
            raise Killed

    with pytest.raises(Killed):
        VaDEEncoder(**params).fit(X, epoch_callback=checkpoint_then_die)
    assert saved["state"]["epoch"] == kill_after
    epochs = []
    resumed = VaDEEncoder(**params).fit(X, resume_state=saved["state"], epoch_callback=lambda e: epochs.append(e.epoch_))
    assert epochs == list(range(kill_after + 1, TINY["epochs"] + 1))  # only the missing epochs ran
    for name, tensor in reference.module_.state_dict().items():
        assert torch.equal(tensor, resumed.module_.state_dict()[name]), name
    assert [h["loss"] for h in resumed.history_] == [h["loss"] for h in reference.history_]
    np.testing.assert_array_equal(resumed.transform(X), reference.transform(X))
    # and the same checkpoint bytes (issue 26): the history read back from the file must not
    # pickle differently from the one built in memory
    assert state_bytes(resumed.checkpoint_state()) == state_bytes(reference.checkpoint_state())
