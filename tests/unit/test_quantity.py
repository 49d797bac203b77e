"""``cluster.rules.quantity`` against Kubernetes' own examples: the table of
``TestQuantityParse`` (its inputs and expected values) and its ``invalid`` list, from
kubernetes/apimachinery tag v0.35.0, pkg/api/resource/quantity_test.go. Upstream writes an
expected value as ``decQuantity(mantissa, scale, format)``, i.e. mantissa * 10**scale; the
saturating entries expect ``maxAllowed`` (2^63-1, pkg/api/resource/math.go). Upstream also
parses every entry with a leading ``-`` (expecting the negated value) and with a leading
``+`` (the same value); so do these tests."""

from __future__ import annotations

from fractions import Fraction

import pytest

from swarm_infra.cluster.rules import quantity


def dec(mantissa: int | float, scale: int) -> Fraction:
    """quantity_test.go ``decQuantity(mantissa, scale, _)``: mantissa * 10**scale."""
    return Fraction(mantissa) * Fraction(10) ** scale


MAX_ALLOWED = Fraction(2**63 - 1)

# TestQuantityParse's table (v0.35.0), in upstream's order; the format column is left out
# (quantity() gives a number, not a serialisation).
UPSTREAM = [
    ("0", dec(0, 0)),
    ("0n", dec(0, 0)),
    ("0u", dec(0, 0)),
    ("0m", dec(0, 0)),
    ("0Ki", dec(0, 0)),
    ("0k", dec(0, 0)),
    ("0Mi", dec(0, 0)),
    ("0M", dec(0, 0)),
    ("0Gi", dec(0, 0)),
    ("0G", dec(0, 0)),
    ("0Ti", dec(0, 0)),
    ("0T", dec(0, 0)),
    # Quantity less numbers are allowed
    ("1", dec(1, 0)),
    # Binary suffixes
    ("1Ki", dec(1024, 0)),
    ("8Ki", dec(8 * 1024, 0)),
    ("7Mi", dec(7 * 1024**2, 0)),
    ("6Gi", dec(6 * 1024**3, 0)),
    ("5Ti", dec(5 * 1024**4, 0)),
    ("4Pi", dec(4 * 1024**5, 0)),
    ("3Ei", dec(3 * 1024**6, 0)),
    ("10Ti", dec(10 * 1024**4, 0)),
    ("100Ti", dec(100 * 1024**4, 0)),
    # Decimal suffixes
    ("5n", dec(5, -9)),
    ("4u", dec(4, -6)),
    ("3m", dec(3, -3)),
    ("9", dec(9, 0)),
    ("8k", dec(8, 3)),
    ("50k", dec(5, 4)),
    ("7M", dec(7, 6)),
    ("6G", dec(6, 9)),
    ("5T", dec(5, 12)),
    ("40T", dec(4, 13)),
    ("300T", dec(3, 14)),
    ("2P", dec(2, 15)),
    ("1E", dec(1, 18)),
    # Decimal exponents
    ("1E-3", dec(1, -3)),
    ("1e3", dec(1, 3)),
    ("1E6", dec(1, 6)),
    ("1e9", dec(1, 9)),
    ("1E12", dec(1, 12)),
    ("1e15", dec(1, 15)),
    ("1E18", dec(1, 18)),
    # Nonstandard but still parsable
    ("1e14", dec(1, 14)),
    ("1e13", dec(1, 13)),
    ("1e3", dec(1, 3)),
    ("100.035k", dec(100035, 0)),
    # Things that look like floating point
    ("0.001", dec(1, -3)),
    ("0.0005k", dec(5, -1)),
    ("0.005", dec(5, -3)),
    ("0.05", dec(5, -2)),
    ("0.5", dec(5, -1)),
    ("0.00050k", dec(5, -1)),
    ("0.00500", dec(5, -3)),
    ("0.05000", dec(5, -2)),
    ("0.50000", dec(5, -1)),
    ("0.5e0", dec(5, -1)),
    ("0.5e-1", dec(5, -2)),
    ("0.5e-2", dec(5, -3)),
    ("0.5e0", dec(5, -1)),
    ("10.035M", dec(10035, 3)),
    ("1.2e3", dec(12, 2)),
    ("1.3E+6", dec(13, 5)),
    ("1.40e9", dec(14, 8)),
    ("1.53E12", dec(153, 10)),
    ("1.6e15", dec(16, 14)),
    ("1.7E18", dec(17, 17)),
    ("9.01", dec(901, -2)),
    ("8.1k", dec(81, 2)),
    ("7.123456M", dec(7123456, 0)),
    ("6.987654321G", dec(6987654321, 0)),
    ("5.444T", dec(5444, 9)),
    ("40.1T", dec(401, 11)),
    ("300.2T", dec(3002, 11)),
    ("2.5P", dec(25, 14)),
    ("1.01E", dec(101, 16)),
    # Things that saturate/round
    ("3.001n", dec(4, -9)),
    ("1.1E-9", dec(2, -9)),
    ("0.0000000001", dec(1, -9)),
    ("0.0000000005", dec(1, -9)),
    ("0.00000000050", dec(1, -9)),
    ("0.5e-9", dec(1, -9)),
    ("0.9n", dec(1, -9)),
    ("0.00000012345", dec(124, -9)),
    ("0.00000012354", dec(124, -9)),
    ("9Ei", MAX_ALLOWED),
    ("9223372036854775807Ki", MAX_ALLOWED),
    ("12E", dec(12, 18)),
    # We'll accept fractional binary stuff, too.
    ("100.035Ki", dec(10243584, -2)),
    ("0.5Mi", dec(0.5 * 1024 * 1024, 0)),
    ("0.05Gi", dec(536870912, -1)),
    ("0.025Ti", dec(274877906944, -1)),
    # Things written by trolls
    ("0.000000000001Ki", dec(2, -9)),  # rounds up, changes format
    (".001", dec(1, -3)),
    (".0001k", dec(100, -3)),
    ("1.", dec(1, 0)),
    ("1.G", dec(1, 9)),
]

# TestQuantityParse's ``invalid`` list (v0.35.0), ``""`` (its first check) and
# TestQuantityParseNonNumericPanic's input.
UPSTREAM_INVALID = [
    "1.1.M",
    "1+1.0M",
    "0.1mi",
    "0.1am",
    "aoeu",
    ".5i",
    "1i",
    "-3.01i",
    "-3.01e-",
    " 1",  # trailing (and leading) whitespace is forbidden
    "1 ",
    "",
    "Non-Numeric",
]


@pytest.mark.parametrize(("text", "expected"), UPSTREAM, ids=[t for t, _ in UPSTREAM])
def test_upstream_examples_parse_to_upstream_values(text: str, expected: Fraction) -> None:
    assert quantity(text) == expected
    assert quantity("-" + text) == -expected
    assert quantity("+" + text) == expected


@pytest.mark.parametrize("text", UPSTREAM_INVALID)
def test_upstream_invalid_examples_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not a quantity"):
        quantity(text)


@pytest.mark.parametrize("text", ["+", "-", "."])
def test_a_sign_or_point_alone_is_outside_the_grammar(text: str) -> None:
    """The grammar's <number> needs a digit; Go's scanner (parseQuantityString) reads these
    as 0, which this restatement refuses (see quantity's docstring)."""
    with pytest.raises(ValueError):
        quantity(text)


@pytest.mark.parametrize(
    ("number", "expected"),
    [(8, Fraction(8)), (0, Fraction(0)), (0.5, Fraction(1, 2)), (0.1, Fraction(1, 10)), (1e-10, dec(1, -9))],
)
def test_a_json_number_is_read_from_its_text(number: int | float, expected: Fraction) -> None:
    """v0.35.0 quantity.go ``UnmarshalJSON`` hands an unquoted number's text to ParseQuantity:
    0.1 is one tenth (not the binary float), 1e-10 rounds up to 1n."""
    assert quantity(number) == expected


def test_a_bool_is_not_a_quantity() -> None:
    with pytest.raises(ValueError):
        quantity(True)
