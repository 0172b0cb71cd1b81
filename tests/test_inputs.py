"""Bad input raises ValueError naming the argument, what was given and what was expected."""

import numpy as np
import pytest

import gflow

pytestmark = pytest.mark.quick  # the whole file is in the fast tier (tests/run.py --quick)

X = np.array([[1.0, 0.0], [0.0, 1.0]])
Y = np.eye(2)
P = [np.array([[0.5, 0.1], [-0.2, 0.4]]), np.array([[0.3, 0.0], [0.1, 0.2]])]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(params=P[:1]), r"params: expected a list .* k >= 2"),
        (dict(params=[P[0], np.ones((2, 3))]), r"params\[1\]: expected 2 columns"),
        (dict(params=[np.ones((2, 3)), P[1]]), r"params\[0\]: expected 2 columns \(d_in of X\)"),
        (dict(params=[P[0], np.ones((3, 2))]), r"params\[-1\]: expected 2 rows \(d_out of Y\)"),
        (dict(params=[P[0], np.ones(2)]), r"params\[1\]: expected a real array of shape \(d_l, d_\{l-1\}\)"),
        (dict(params=[P[0] * np.nan, P[1]]), r"params\[0\]: expected finite values"),
        (dict(X=np.ones((3, 2))), r"Y: expected shape \(3, 'd_out'\)"),
        (dict(X=X * np.inf), r"X: expected finite values"),
        (dict(Y=Y * np.nan), r"Y: expected finite values"),
        (dict(X=np.ones(2)), r"X: expected a real array of shape \(n, d_in\)"),
        (dict(t1=0.0), r"t1: expected a finite positive float"),
        (dict(t1=-1.0), r"t1: expected a finite positive float"),
        (dict(t1=np.inf), r"t1: .*inf only with gtol, ltol or dtol"),
        (dict(rtol=0.0), r"rtol: expected a finite positive float"),
        (dict(rtol=2.0), r"rtol: expected a value in \(0, 1\)"),
        (dict(atol=-1e-9), r"atol: expected a finite positive float"),
        (dict(atol=np.nan), r"atol: expected a finite positive float"),
        (dict(weight_decay=-0.1), r"weight_decay: expected a finite float >= 0"),
        (dict(motion_tol=0.0), r"motion_tol: expected a finite positive float"),
        (dict(loss="hinge"), r"loss: expected one of"),
        (dict(solver="euler"), r"solver: expected one of"),
        (dict(saveat=[0.0, 2.0, 1.0]), r"saveat: expected strictly increasing"),
        (dict(saveat=[0.0, 20.0]), r"saveat: expected strictly increasing finite times in \[0, t1"),
        (dict(max_steps=0), r"max_steps: expected a positive integer"),
        (dict(max_events=1.5), r"max_events: expected a positive integer"),
        (dict(modes=np.ones(3, int)), r"modes: expected shape \(4,\) or \(1, 4\)"),
        (dict(modes=np.full(4, 3)), r"modes: expected integers 0 \(inactive\), 1 \(active\), 2 \(sliding\) or -1"),
        (dict(modes=np.ones(4)), r"modes: expected integers .* got float64 values"),
        # p = (0.5, 0.1, -0.2, 0.4) in the flat order (neuron, point).
        (
            dict(modes=np.ones(4, int)),
            r"modes: member 0, pre-activation 2 \(layer 0, neuron 1, point 0\) is given active but p = -0.2",
        ),
        (dict(modes=np.array([1, 1, 0, 2])), r"modes: member 0, pre-activation 3 .* given sliding but p = 0.4"),
    ],
)
def test_bad_input(kwargs, match):
    args = dict(params=P, X=X, Y=Y, t1=10.0)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        gflow.simulate(args.pop("params"), args.pop("X"), args.pop("Y"), **args)


def test_classification_labels():
    W = [P[0], np.array([[0.3, 0.1]])]
    with pytest.raises(ValueError, match=r"Y: expected labels in \{-1, \+1\}"):
        gflow.simulate(W, X, np.array([1.0, 0.0]), loss="logistic", t1=1.0)
    with pytest.raises(ValueError, match=r"Y: expected ±1 labels of shape \(2,\)"):
        gflow.simulate(W, X, np.ones(3), loss="exponential", t1=1.0)
    with pytest.raises(ValueError, match=r"params\[-1\]: expected 1 rows"):
        gflow.simulate(P, X, np.array([1.0, -1.0]), loss="exponential", t1=1.0)


def test_batch_shapes():
    batch = [np.stack([W, W]) for W in P]
    with pytest.raises(ValueError, match=r"params: expected one batch size on every matrix"):
        gflow.simulate_batch([batch[0], batch[1][:1]], X, Y, t1=1.0)
    with pytest.raises(ValueError, match=r"X, Y: expected a leading batch axis of size 2"):
        gflow.simulate_batch(batch, np.stack([X] * 3), np.stack([Y] * 3), t1=1.0)
    with pytest.raises(ValueError, match=r"weight_decay: expected a finite float >= 0 or 2 of them"):
        gflow.simulate_batch(batch, X, Y, t1=1.0, weight_decay=[0.1, 0.2, 0.3])


def test_sliding_modes_accepted_within_the_held_band():
    """A run holds a sliding unit within ``_HELD_BAND`` round-off bands of its surface
    (``flow._held_guards``), so its ``final_modes`` may mark a unit that far off as sliding
    and must continue it (the 20-point Scale run, continued at a save time, had one at
    1.0 band: refused before); beyond that the modes are refused, naming that band."""
    from gflow.flow import _HELD_BAND
    from gflow.solve import _as_modes

    rtol, atol = 1e-8, 1e-10
    band = 10 * (atol + rtol * 1.0)  # max|p| ≤ 1 here
    W0 = np.array([[1.0, 0.0], [0.0, 1.0]])
    Xs = np.array([[0.5, 0.3], [0.2, 0.4]])
    for off, accepted in [(-0.5, True), (2.0, True), (0.99 * _HELD_BAND, True), (1.01 * _HELD_BAND, False)]:
        x = Xs.copy()
        x[1, 0] = off * band  # p of neuron 0 at point 1 (flat index 1)
        args = ([W0[None], P[1][None]], x[None], 1, 4, rtol, atol, 4)
        modes = np.array([1, 2, 1, 1])
        if accepted:
            np.testing.assert_array_equal(_as_modes(modes, *args), modes[None])
        else:
            with pytest.raises(ValueError, match=r"pre-activation 1 .* given sliding .* band ±4e-07"):
                _as_modes(modes, *args)
