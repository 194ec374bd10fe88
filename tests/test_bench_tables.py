"""The markdown tables of `ltvm bench`, `bench fleq` and `bench vsubleq` show every figure
that is not zero as such, the way the JSON gives it."""

from __future__ import annotations

from vm.tools.bench import BenchRow, FleqBenchRow, format_fleq_table, format_table
from vm.tools.vsubleq_bench import VsubleqBenchRow, format_vsubleq_table


def cells(table: str) -> list[str]:
    return [cell.strip() for cell in table.splitlines()[-1].strip("|").split("|")]


def test_a_slow_subleq_row_shows_its_rate_and_ratio_instead_of_zero():
    """n = 16384, --evaluation full: 20 steps/s against the reference's 418,414 printed the
    ratio 0.000 (JSON: 4.8e-05); a rate below half a step a second printed 0."""
    row = BenchRow(16384, 1, "cpu", "float32", "masked", "full", 1, 0.25, 0.17, 418_414.0,
                   0.031, 0)
    assert cells(format_table([row]))[7:12] == ["0.25", "0.170", "418,414", "+3.1%", "5.97e-07"]
    fast = BenchRow(64, 256, "cpu", "float32", "masked", "fused", 2, 619_241.4, 0.3, 413_106.0,
                    -0.2, 0)
    assert cells(format_table([fast]))[7:12] == ["619,241", "0.300", "413,106", "-20.0%",
                                                 "1.499"]


def test_a_slow_fleq_row_shows_its_rate_and_ratio_instead_of_zero():
    row = FleqBenchRow("big.fleq", 8, 612, 473, 16, 227, 1, "cpu", "float64", "masked", "full",
                       1, 30.0, 60.0, 0, 70_254.8, 0.0)
    assert cells(format_fleq_table([row]))[14:18] == ["0.0333", "70,254.8", "+0.0%", "4.74e-07"]


def test_a_slow_vsubleq_row_shows_its_rate_instead_of_zero():
    row = VsubleqBenchRow(32768, 64, 32770, 947, 6, 3, "cpu", "float32", "dense", "full", 6.2,
                          0.02, 80.0, 322_955.0, 0.5)
    assert cells(format_vsubleq_table([row]))[11:16] == ["0.02", "80.000", "322,955", "+50.0%",
                                                          "6.19e-08"]
