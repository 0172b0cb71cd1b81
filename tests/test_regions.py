"""The region tracker against the modes the engine ends in and the paper's regions."""

import numpy as np
import pytest

import gflow
from gflow.regions import two_point_name, unit_gaps

pytestmark = pytest.mark.quick  # the whole file is in the fast tier (tests/run.py --quick)

TIGHT = dict(rtol=1e-12, atol=1e-14)


def test_two_point_names():
    assert [two_point_name(p) for p in ("++", "+-", "-+", "--")] == ["S", "S1", "S2", "D"]
    assert two_point_name("+0") == "S1|S" and two_point_name("0-") == "S1|D"


def test_unit_gaps_of_a_hand_made_network():
    """Depth 3 on x_1 = e_1, x_2 = e_2: the pre-activations are read off the weights
    (layer 1: ``W_1``'s columns; layer 2: ``W_2 relu(W_1 x_i)``), flat order layer, neuron,
    point."""
    X = np.eye(2)
    params = [np.array([[1.0, -2.0], [0.5, 0.0]]), np.array([[1.0, -1.0]]), np.array([[1.0]])]
    # p = [1, -2, 0.5, 0 | 1 - 0.5, 0 - 0] = [1, -2, 0.5, 0, 0.5, 0]
    N, A, S = gflow.events.INACTIVE, gflow.events.ACTIVE, gflow.events.SLIDING  # inactive, active, sliding
    assert np.array_equal(unit_gaps([A, A, N, S, S, N], params, X), [0.0, 2.0, 0.5, 0.0, 0.5, 0.0])
    assert np.array_equal(unit_gaps([A, N, A, N, A, A], params, X), np.zeros(6))
    for modes in ([A] * 5, [A] * 5 + [3]):
        with pytest.raises(ValueError, match=r"modes: expected 6 modes in \{0, 1, 2\}"):
            unit_gaps(modes, params, X)


def test_intervals_rebuild_final_modes_and_regions(authors, authors_xavier):
    X, Y = authors
    members = [8, 73, 138, 195, 0, 4, 12, 40]  # several of these slide (see test_flow)
    params = [W[members] for W in authors_xavier]
    sol = gflow.simulate_batch(params, X, Y, t1=150.0, **TIGHT)
    for call in (lambda: sol.modes_at(0.0), lambda: sol.mode_gaps(X)):
        with pytest.raises(ValueError, match="solution: expected a single-trajectory solution"):
            call()
    for b in range(len(members)):
        one = sol[b]
        regions = one.regions(0)
        for nr in regions:
            ivs = nr.intervals
            assert ivs[0].t_start == 0.0 and ivs[-1].t_end == float(one.t)
            assert all(a.t_end == b.t_start and a.pattern != b.pattern for a, b in zip(ivs, ivs[1:]))
            # The last pattern is the engine's final mode of this neuron on each point.
            modes = one.final_modes[nr.neuron * 2 : nr.neuron * 2 + 2]
            assert ivs[-1].pattern == "".join({0: "-", 1: "+", 2: "0"}[int(m)] for m in modes)
            # Outside sliding, the named region matches the signs of w_j·x_i at the end.
            # (A neuron that died on its surface keeps p within round-off of 0.)
            if "0" not in ivs[-1].pattern:
                p = one.params[0][nr.neuron] @ X.T
                for c, v in zip(ivs[-1].pattern, p):
                    assert (v > -1e-9) if c == "+" else (v < 1e-9)
            assert nr.at(0.0) is ivs[0] and nr.at(float(one.t) + 1) is ivs[-1]
        # Every mode replayed to the end is the engine's final mode, and the end weights
        # are on the sides (or surfaces) those modes say.
        assert np.array_equal(one.modes_at(one.t), one.final_modes)
        assert np.max(one.mode_gaps(X)) <= 1e-9
        # A neuron whose pattern at t = 0 is known from the initial weights.
        p0 = params[0][b] @ X.T
        assert regions[0].intervals[0].pattern == "".join("+" if v > 0 else "-" for v in p0[0])


def test_s1_s2_start_never_changes_region(authors):
    """Theorem 3's mechanism: one neuron in S1, the other in S2, V(0) = 0: each stays."""
    X, Y = authors
    W = np.array([0.3 * X[0] - 0.1 * X[1], 0.25 * X[1] - 0.05 * X[0]])
    sol = gflow.simulate([W, np.zeros((2, 2))], X, Y, t1=150.0, **TIGHT)
    assert [nr.sequence() for nr in sol.regions(0)] == [["S1"], ["S2"]]
    assert sol.loss < 1e-20
    for t in (-1.0, float("nan"), 151.0, [[0.0]]):
        with pytest.raises(ValueError, match=r"t: expected a time or a 1-D array of times in \[0, 150"):
            sol.modes_at(t)
    with pytest.raises(ValueError, match=r"t: expected None or one of the solution's save times up to 150"):
        sol.mode_gaps(X, 1.0)  # saved nothing
