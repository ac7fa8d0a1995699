"""Numbers written for people (watch/format.py): three significant digits, a unit or an SI suffix, the role of an op kept."""

import pytest

from ranktop.watch import format as fmt


@pytest.mark.parametrize(
    "value, text",
    [(0, "0"), (0.0186, "0.0186"), (0.5, "0.500"), (0.9996, "1.00"), (1.049, "1.05"), (17.06, "17.1"), (99.96, "100"), (968.4, "968")],
)
def test_significant_writes_three_significant_digits_and_never_an_exponent(value, text):
    assert fmt.significant(value) == text


@pytest.mark.parametrize(
    "value, text",
    [(960, "960"), (30.0, "30"), (1110, "1.11k"), (140120.3, "140k"), (1245184, "1.25M"), (999_999, "1M"), (None, "–")],
)
def test_si_writes_counts_and_rates_with_a_suffix(value, text):
    assert fmt.si(value) == text


def test_si_takes_a_unit_after_the_suffix():
    assert fmt.si(140120, "/s") == "140k/s"


@pytest.mark.parametrize(
    "value, text",
    [(991755.7e6, "992 GB/s"), (125.8e6, "126 MB/s"), (1.049e9, "1.05 GB/s"), (5, "5.00 B/s"), (2.5e15, "2500 TB/s"), (None, "–")],
)
def test_bandwidth_is_in_decimal_units_as_nccl_tests_count(value, text):
    assert fmt.bandwidth(value) == text


def test_no_rate_or_size_on_the_screen_has_five_integer_digits_and_a_decimal_point():
    for value in (1.0, 12.34, 140120.3, 991755.7, 1.2e9, 8.8e11, 4.17e12):
        for text in (fmt.si(value), fmt.bandwidth(value)):
            number = text.split()[0].rstrip("kMGTP/s")
            assert not ("." in number and len(number.split(".")[0]) >= 5), text
            assert len(number.replace(".", "").lstrip("0")) <= 4, text


@pytest.mark.parametrize(
    "op, group, width, text",
    [
        ("ddp_allreduce", 8, 22, "ddp_allreduce ×8"),
        ("recv@pp", 2, 22, "recv@pp ×2"),
        ("reduce_scatter_tensor@dp", 64, 22, "reduce_scatter…@dp ×64"),
        ("all_gather_into_tensor@tp", None, 12, "all_gath…@tp"),
    ],
)
def test_an_op_key_is_shortened_in_its_name_never_in_its_role(op, group, width, text):
    assert fmt.op_key(op, width, group) == text
    assert len(text) <= width


def test_an_op_key_too_narrow_for_its_name_keeps_the_role_first():
    assert fmt.op_key("reduce_scatter_tensor@dp", 6, 64) == "r@dp ×"
