"""Reports sent by ranks and the tables printed from them."""

import torch

from ddp_lesson import reports


def test_reports_round_trip_sorted_by_rank(tmp_path, monkeypatch):
    monkeypatch.setattr(reports, "_connected", None)
    monkeypatch.setenv(reports.REPORT_DIR_ENV, str(tmp_path))
    reports.send_report(1, device="cpu", grads=torch.arange(3.0))
    reports.send_report(0, device="cpu", grads=torch.zeros(3))
    got = reports.collect(tmp_path)
    assert [r["rank"] for r in got] == [0, 1]
    assert torch.equal(got[1]["grads"], torch.arange(3.0))
    assert not list(tmp_path.glob("*.partial"))


def test_a_connected_process_reports_to_its_launch_whatever_the_environment_says(
    tmp_path, monkeypatch
):
    monkeypatch.setenv(reports.REPORT_DIR_ENV, str(tmp_path / "elsewhere"))
    monkeypatch.setattr(reports, "_connected", None)
    reports.connect(tmp_path / "mine")
    try:
        reports.send_report(0, device="cpu")
    finally:
        reports.connect(None)
    assert [r["rank"] for r in reports.collect(tmp_path / "mine")] == [0]
    assert not (tmp_path / "elsewhere").exists()


def test_without_a_launch_the_report_is_printed(monkeypatch, capsys):
    monkeypatch.setattr(reports, "_connected", None)
    monkeypatch.delenv(reports.REPORT_DIR_ENV, raising=False)
    reports.send_report(0, device="cpu")
    assert capsys.readouterr().out.strip() == "[rank 0] {'device': 'cpu'}"


def test_table_rounds_floats_and_aligns_numbers():
    text = reports.table(
        [{"rank": 0, "loss": 0.123456789, "seen": [1, 2]}, {"rank": 10, "loss": 2.0}],
        ["rank", "loss", "seen"],
    )
    assert text.splitlines() == [
        "rank  loss    seen",
        "   0  0.1235  [1, 2]",
        "  10  2.0000  -",
    ]


def test_max_abs_difference():
    a, b = torch.tensor([1.0, -2.0]), torch.tensor([1.5, -2.0])
    assert reports.max_abs_difference([a, b]) == 0.5
    assert reports.max_abs_difference([a]) == 0.0
