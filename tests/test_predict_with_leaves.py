"""The fit stage routes every row once (issue 35): predictions and leaves from one apply, the
leaves handed to the report's reading of the tree."""

import numpy as np
import pytest
from sklearn.datasets import make_blobs

from pipeline.trees import CART, IMM
from pipeline.trees._fitting import predict_with_leaves
from pipeline.validation import InvalidInputError


@pytest.mark.parametrize("make", [lambda: CART(n_leaves=5), lambda: IMM()])
def test_predictions_and_leaves_equal_predict_and_apply(make):
    X, y = make_blobs(600, centers=4, n_features=3, random_state=0)
    est = make()
    est = est.fit(X, y, centers=np.stack([X[y == k].mean(0) for k in range(4)])) if isinstance(est, IMM) else est.fit(X, y)
    pred, leaves = predict_with_leaves(est, X)
    assert np.array_equal(pred, est.predict(X)) and pred.dtype == np.int64
    assert np.array_equal(leaves, est.tree_.apply(X)) and leaves.dtype == np.uint8
    reading = est.tree_.read(X, reference=y, leaves=leaves)
    assert reading.stats == est.tree_.read(X, reference=y).stats
    with pytest.raises(InvalidInputError, match="one integer leaf id per row"):
        est.tree_.read(X, leaves=leaves[:-1])


def test_an_estimator_whose_prediction_is_not_its_leaf_is_predicted_row_by_row():
    X, y = make_blobs(300, centers=3, n_features=2, random_state=1)
    est = CART(n_leaves=3).fit(X, y)

    class Odd(type(est)):
        def predict(self, X):  # not a function of the leaf: depends on the row's position
            return (np.arange(len(X)) % 2).astype(np.int64)

    odd = Odd(n_leaves=3).fit(X, y)
    pred, leaves = predict_with_leaves(odd, X)
    assert np.array_equal(pred, odd.predict(X))
    assert np.array_equal(leaves, odd.tree_.apply(X))


def test_tree_predictions_are_kept_in_the_smallest_integer_type():
    """A 10M-row run's four trees kept 80 MB of int64 predictions each; the same ids, smaller."""
    import numpy as np

    from pipeline.app.stages.fit import compact_ids

    for ids, kind in (([0, 3, 9], np.int8), ([-1, 0, 127], np.int8), ([0, 200], np.int16), ([-1, 40_000], np.int32),
                      ([0, 2**40], np.int64)):
        out = compact_ids(np.array(ids, dtype=np.int64))
        assert out.dtype == kind and out.tolist() == ids
    assert compact_ids(np.array([], dtype=np.int64)).dtype == np.int64
