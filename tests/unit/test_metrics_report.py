"""Table, JSON and PNG outputs of a run."""

from __future__ import annotations

import json

import pytest

from swarm_infra.metrics.compare import compare
from swarm_infra.metrics.measurement import Measurement, make_labels
from swarm_infra.metrics.report import to_json, to_table


def _bw(value: float, path: str, src: str = "a1", dst: str = "b1") -> Measurement:
    labels = make_labels(src=src, dst=dst, path=path, streams=4)
    return Measurement("iperf3", "end.sum_received.bits_per_second", value, "bits/s", labels)


def _rtt(value: float, src: str, dst: str) -> Measurement:
    return Measurement("ping", "rtt.p50", value, "ms", make_labels(src=src, dst=dst, path="mesh"))


def test_json_and_table_carry_values_and_flag_the_regression():
    prev = [_bw(1000.0, "mesh"), _bw(2000.0, "underlay")]
    cur = [_bw(800.0, "mesh"), _bw(1990.0, "underlay"), _rtt(3.0, "a1", "b1")]
    changes = compare(cur, prev)
    doc = json.loads(to_json(7, cur, changes))
    assert doc["run"] == 7 and doc["regressions"] == 1
    mesh, underlay, rtt = doc["measurements"]
    assert mesh["regression"] is True and mesh["change"] == pytest.approx(-0.2)
    assert underlay["regression"] is False and mesh["labels"]["path"] == "mesh"
    assert "previous" not in rtt
    lines = to_table(cur, changes).splitlines()
    assert lines[0].split() == ["TOOL", "FIELD", "LABELS", "VALUE", "UNIT", "VS", "PREVIOUS"]
    assert lines[1].endswith("-20.0%  REGRESSION") and "REGRESSION" not in lines[2]


def test_plots_are_pngs_of_the_data(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.image

    from swarm_infra.metrics.plots import bandwidth_bars, latency_heatmap

    ms = [_bw(800e6, "mesh"), _bw(900e6, "underlay"), _rtt(3.0, "a1", "b1"), _rtt(0.2, "a1", "a2")]
    sites = {"a1": "a", "a2": "a", "b1": "b"}
    heat = latency_heatmap(ms, tmp_path / "latency.png", sites)
    bars = bandwidth_bars(ms, tmp_path / "bandwidth.png")
    for png in (heat, bars):
        assert png is not None and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert matplotlib.image.imread(png).ndim == 3
    assert latency_heatmap(ms[:2], tmp_path / "none.png", sites) is None
    assert bandwidth_bars(ms[2:], tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()


def test_training_and_inference_plots_need_their_measurements(tmp_path):
    pytest.importorskip("matplotlib")
    from swarm_infra.metrics.plots import inference_latency, training_scaling

    # Superlinear scaling (efficiency 1.4, seen on shared lab CPUs) must still plot.
    train = [
        Measurement("ray", field, v * k, "samples/s", make_labels(workers=n, scaling="weak"))
        for n, v in ((1, 50_000.0), (2, 140_000.0))
        for field, k in (("training.samples_per_s", 1.0), ("training.samples_per_s.min", 0.9))
    ]
    serve = [
        Measurement("ray-serve", f, v, u, make_labels(rate=c))
        for c in (20, 40)
        for f, v, u in (
            ("latency.p50", 100.0 * c, "ms"),
            ("latency.p99", 200.0 * c, "ms"),
            ("requests_per_s", 7.0 * c, "1/s"),
        )
    ]
    for png in (training_scaling(train, tmp_path / "t.png"), inference_latency(serve, tmp_path / "i.png")):
        assert png is not None and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert training_scaling(serve, tmp_path / "none.png") is None
    assert inference_latency(train, tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()


def test_the_training_plots_legend_names_each_series_once(tmp_path, monkeypatch):
    """The legend reads the error bar's container, not its cap lines (whose label is
    matplotlib's "_nolegend_")."""
    pytest.importorskip("matplotlib")
    from swarm_infra.metrics import plots

    plt = plots._pyplot()
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    train = [
        Measurement("ray", field, v * k, "samples/s", make_labels(workers=n, scaling="weak"))
        for n, v in ((1, 50_000.0), (2, 80_000.0))
        for field, k in (("training.samples_per_s", 1.0), ("training.samples_per_s.min", 0.9))
    ]
    assert plots.training_scaling(train, tmp_path / "t.png") is not None
    (fig,) = figures
    (legend,) = [a.get_legend() for a in fig.axes if a.get_legend() is not None]
    texts = sorted(t.get_text() for t in legend.get_texts())
    assert texts == ["efficiency", "linear (ideal)", "median (min-max)"]
    fig.clf()
