"""The markdown tables of `ltvm bench`, `bench fleq` and `bench vsubleq` show every figure
that is not zero as such, the way the JSON gives it."""

from __future__ import annotations

import math

from vm.tools.bench import (BenchRow, FleqBenchRow, format_fleq_table, format_growth,
                            format_table, growth)
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


def test_a_vsubleq_ratio_reads_as_the_other_benches_ratios():
    """`bench vsubleq` printed 9.79e-02 where `bench` prints 0.190 and `bench fleq` 0.0055."""
    row = VsubleqBenchRow(256, 16, 258, 947, 5, 3, "cpu", "float32", "masked", "fused", 1.0,
                          45_360.0, 0.5, 463_300.0, 0.0)
    assert cells(format_vsubleq_table([row]))[15] == "0.098"


def rate_row(columns: int, batch: int, steps_per_second: float,
             reference: float = 400_000.0) -> BenchRow:
    return BenchRow(columns, batch, "cpu", "float32", "masked", "fused", 1, steps_per_second,
                    0.1, reference, 0.0, 0)


def test_growth_reads_the_exponent_between_the_fewest_and_the_most_columns():
    """Batch 1 halves its rate from n = 64 to 4096 (64x the columns): cost ~ n^(1/6); the
    middle n does not enter. Against the reference, which ran at half speed in the 4096
    row too, the cost did not grow at all. Batch 256 measured at one n has no growth; a
    rate of 0 gives NaN, not a division error."""
    rows = [rate_row(4096, 1, 50_000.0, 200_000.0), rate_row(64, 1, 100_000.0),
            rate_row(1024, 1, 1.0), rate_row(64, 256, 300_000.0), rate_row(16, 4, 0.0),
            rate_row(64, 4, 10.0)]
    found = growth(rows)
    assert [(item.batch, item.fewest, item.most) for item in found] == [(1, 64, 4096),
                                                                         (4, 16, 64)]
    assert math.isclose(found[0].exponent, 1 / 6) and math.isnan(found[1].exponent)
    assert found[0].exponent_against_reference == 0.0
    assert math.isnan(found[1].exponent_against_reference)
    assert format_growth(found[:1]) == ("batch 1: a pass costs ~ n^0.17 from n = 64 to 4096 "
                                         "(n^0.00 against the reference beside each row)")
