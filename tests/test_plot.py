"""Tests of the figures' conventions in gflow.plot: one palette for the regions in every
panel, labels that never overlap, a time axis that covers the whole run and says so.

Cheap: hand-made region timelines (:class:`gflow.regions.Interval`) in a Solution-like
object, no integration and no compilation. The colours of the cones are read back from
the pixels :func:`gflow.plot.plot_cones` draws, not from the palette itself.
"""

import itertools
import types

import matplotlib

matplotlib.use("Agg")

import matplotlib.colors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.text  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from gflow import plot  # noqa: E402
from gflow.regions import Interval, NeuronRegions  # noqa: E402
from gflow.theory import authors_data  # noqa: E402

pytestmark = pytest.mark.quick  # no integration, no compilation: seconds


def timeline(neurons, t_end):
    """A Solution-like object whose ``regions(0)`` are ``neurons``: one list per neuron of
    ``(t_start, t_end, label)``."""
    regions = [
        NeuronRegions(0, j, tuple(Interval(a, b, "", name) for a, b, name in ivs)) for j, ivs in enumerate(neurons)
    ]
    return types.SimpleNamespace(t=np.float64(t_end), crossings=None, regions=lambda layer=0: regions)


# The demo's seed 40 (every kind of label, three of them within t < 1) and a run whose
# changes spread over six decades, with a pattern outside the two-point names.
DEMO = timeline(
    [
        [(0.0, 0.095, "S"), (0.095, 0.15, "S2|S"), (0.15, 0.72, "origin"), (0.72, 150.0, "S2|D")],
        [(0.0, 0.72, "S2"), (0.72, 150.0, "D")],
    ],
    150.0,
)
SPREAD = timeline(
    [
        [(0.0, 3e-4, "S"), (3e-4, 4e-4, "S1|S"), (4e-4, 2.0, "S1"), (2.0, 2.1, "origin"), (2.1, 200.0, "D")],
        [(0.0, 12.0, "S2"), (12.0, 12.5, "S2|D"), (12.5, 200.0, "S2")],
        [(0.0, 1e-3, "+-0"), (1e-3, 200.0, "+--")],
    ],
    200.0,
)


def cone_colours(ax):
    """Colour of each cone in a :func:`plot_cones` panel: the image's pixel under the
    cone's name."""
    image = ax.get_images()[0]
    values = image.get_array()
    x0, x1, y0, y1 = image.get_extent()
    out = {}
    for text in ax.texts:
        if text.get_text() in ("D", "S", "S1", "S2"):
            x, y = text.get_position()
            col = int((x - x0) / (x1 - x0) * (values.shape[1] - 1))
            row = int((y - y0) / (y1 - y0) * (values.shape[0] - 1))
            out[text.get_text()] = matplotlib.colors.to_hex(image.to_rgba(values[row, col]))
    assert sorted(out) == ["D", "S", "S1", "S2"]
    return out


def bars(ax):
    """``(label, patch)`` for every interval's bar of a :func:`plot_regions` panel."""
    return [(p.get_gid().removeprefix("region:"), p) for p in ax.patches if (p.get_gid() or "").startswith("region:")]


def drawn_texts(fig):
    """Every non-empty text the figure draws, tick labels only for ticks in view."""
    out = []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks():
                if lo - 1e-9 * max(1.0, abs(hi)) <= tick.get_loc() <= hi + 1e-9 * max(1.0, abs(hi)):
                    out += [t for t in (tick.label1, tick.label2) if t.get_visible() and t.get_text()]
        out += [t for t in (ax.title, ax.xaxis.label, ax.yaxis.label) if t.get_text()]
        out += [t for t in ax.texts if t.get_visible() and t.get_text()]
        legend = ax.get_legend()
        if legend is not None:
            out += [t for t in (legend.get_title(), *legend.get_texts()) if t.get_text()]
    return out


def assert_no_overlap(fig):
    fig.tight_layout()
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in drawn_texts(fig)]
    for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2):
        assert not box_a.overlaps(box_b), f"labels {a!r} and {b!r} overlap: {box_a} and {box_b}"
    return renderer


@pytest.mark.parametrize("sol", [DEMO, SPREAD], ids=["demo", "spread"])
def test_regions_take_the_cones_colours(sol):
    X, _ = authors_data()
    fig, (ax_c, ax_r) = plt.subplots(1, 2)
    colours = cone_colours(plot.plot_cones(X, ax=ax_c))
    plot.plot_regions(sol, ax=ax_r)
    drawn = bars(ax_r)
    assert len(drawn) == sum(len(nr.intervals) for nr in sol.regions(0))
    cone_bars = [(label, p) for label, p in drawn if label in colours]
    sliding = [(label, p) for label, p in drawn if "|" in label]
    assert cone_bars and sliding
    for label, patch in cone_bars:
        assert matplotlib.colors.to_hex(patch.get_facecolor()) == colours[label], label
        assert not patch.get_hatch()
    for label, patch in sliding:  # filled with the first side's colour, hatched
        assert matplotlib.colors.to_hex(patch.get_facecolor()) == colours[label.split("|")[0]], label
        assert patch.get_hatch()
    others = {label: p for label, p in drawn if label not in colours and "|" not in label}
    faces = [matplotlib.colors.to_hex(p.get_facecolor()) for p in others.values()]
    assert len(set(faces)) == len(faces) and not set(faces) & set(colours.values())  # told apart from the cones
    # The legend shows every label once, each with its bar's look.
    legend = ax_r.get_legend()
    names = [t.get_text().split(" ")[0] for t in legend.get_texts()]
    assert sorted(names) == sorted({label for label, _ in drawn})
    for name, handle in zip(names, legend.legend_handles):
        patch = dict(drawn)[name]
        assert matplotlib.colors.to_hex(handle.get_facecolor()) == matplotlib.colors.to_hex(patch.get_facecolor())
        assert handle.get_hatch() == patch.get_hatch()
    plt.close(fig)


@pytest.mark.parametrize("figsize", [(11, 4.6), (6, 2.5)])
@pytest.mark.parametrize("sol", [DEMO, SPREAD], ids=["demo", "spread"])
def test_labels_never_overlap_and_sit_inside_their_bars(sol, figsize):
    X, _ = authors_data()
    if figsize[0] > 8:  # the demo's layout: cones and timeline side by side
        fig, (ax_c, ax) = plt.subplots(1, 2, figsize=figsize, width_ratios=(1, 1.25))
        plot.plot_cones(X, ax=ax_c)
    else:
        fig, ax = plt.subplots(figsize=figsize)
    plot.plot_regions(sol, ax=ax)
    renderer = assert_no_overlap(fig)
    drawn = bars(ax)
    assert ax.texts  # long intervals keep their label inside
    for text in ax.texts:
        inside = [p for label, p in drawn if label == text.get_text() and p.contains_point(
            ax.transData.transform(text.get_position()))]  # fmt: skip
        assert len(inside) == 1, text.get_text()
        box, bar = text.get_window_extent(renderer), inside[0].get_window_extent(renderer)
        assert bar.x0 <= box.x0 and box.x1 <= bar.x1, f"label {text.get_text()!r} spills out of its bar"
    plt.close(fig)


@pytest.mark.parametrize("sol", [DEMO, SPREAD], ids=["demo", "spread"])
def test_time_axis_covers_the_run_and_says_so(sol):
    fig, ax = plt.subplots()
    plot.plot_regions(sol, ax=ax)
    t_end = float(sol.t)
    assert ax.get_xlim() == (0.0, t_end)
    assert f"the run ends at t = {t_end:g}" in ax.get_xlabel()
    first = min(iv.t_start for nr in sol.regions(0) for iv in nr.intervals if iv.t_start > 0)
    assert ax.get_xscale() == "symlog"
    linthresh = ax.xaxis.get_transform().linthresh
    assert linthresh <= first < 10 * linthresh  # linear only up to the first change's decade
    assert f"linear up to {linthresh:g}" in ax.get_xlabel()
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"neuron {j + 1}" for j in range(len(sol.regions(0)))]
    assert ax.get_ylim()[0] > ax.get_ylim()[1]  # neuron 1 on top
    plt.close(fig)


def test_timeline_without_changes_is_linear():
    fig, ax = plt.subplots()
    plot.plot_regions(timeline([[(0.0, 5.0, "S")], [(0.0, 5.0, "S1")]], 5.0), ax=ax)
    assert ax.get_xscale() == "linear" and ax.get_xlim() == (0.0, 5.0)
    assert [t.get_text() for t in ax.texts] == ["S", "S1"]
    plt.close(fig)
