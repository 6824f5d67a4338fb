"""Small views of the probe's figures: skipped steps, the expected link, the phase bars."""

from __future__ import annotations

import pandas as pd

from dsmon.analysis import training
from dsmon.analysis.peaks import expected_link
from dsmon.figures.ranks import phases_figure
from dsmon.figures.training import training_figure


def test_a_skipped_step_is_one_whose_counter_grew() -> None:
    stats = pd.DataFrame({"step": [1, 2, 3, 4, 5], "skipped_steps": [1, 1, 2, 2, None]})
    assert training.skipped_steps(stats).tolist() == [1.0, 3.0]
    assert training.skipped_steps(pd.DataFrame()).tolist() == []


def test_skipped_steps_are_marked_on_the_loss_row() -> None:
    stats = pd.DataFrame(
        {"step": [1.0, 2.0, 3.0], "loss": [3.0, 2.5, 2.0], "grad_norm": [1.0, None, 0.5]}
    )
    series = training.probe_series(stats, ["loss", "grad norm"])
    fig = training_figure(series, skipped=[2.0])
    marks = [t for t in fig.data if t.name.startswith("step skipped")]
    assert [(list(t.x), list(t.y)) for t in marks] == [([2.0], [2.5]), ([2.0], [0.5])]


def test_the_link_inside_a_node_is_guessed_from_the_gpu_model() -> None:
    link = expected_link(["NVIDIA H100 80GB HBM3"] * 8, 1)
    assert link is not None and link.name.startswith("NVLink 4")
    pcie = expected_link(["NVIDIA A100-PCIE-40GB"], 1)
    assert pcie is not None and pcie.name.startswith("PCIe 4.0")
    assert expected_link(["NVIDIA H100 80GB HBM3"], 2) is None  # between nodes: the network
    assert expected_link(["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"], 1) is None
    assert expected_link([], 1) is None


def test_each_ranks_bar_holds_its_input_beside_the_engines_phases() -> None:
    phases = pd.DataFrame(
        {"rank": [0.0, 1.0], "step": [0.0, 0.0], "n": [10.0, 10.0], "fwd_ms": [5.0, 5.0],
         "bwd_ms": [20.0, 8.0], "step_ms": [3.0, 3.0], "input_ms": [0.5, 12.0],
         "coll_ms": [14.0, 2.0], "total_ms": [30.0, 30.0]}
    )  # fmt: skip
    fig = phases_figure(phases)
    by_name = {t.name: [float(v) for v in t.x] for t in fig.data}
    assert by_name["input (before the forwards)"] == [0.5, 12.0]
    assert by_name["other (outside the engine)"] == [1.5, 2.0]
