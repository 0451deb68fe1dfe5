"""Strict semver 2.0.0: what parses, what does not, and precedence (semver.org §11)."""

from __future__ import annotations

import random

import pytest

from kdra.dra.semver import InvalidVersion, Version, is_valid_version, parse_version


@pytest.mark.parametrize(
    ("text", "major", "minor", "patch", "pre", "build"),
    [
        ("1.2.3", 1, 2, 3, (), ()),
        ("0.0.0", 0, 0, 0, (), ()),
        ("10.20.30", 10, 20, 30, (), ()),
        ("1.0.0-alpha", 1, 0, 0, ("alpha",), ()),
        ("1.0.0-alpha.1", 1, 0, 0, ("alpha", "1"), ()),
        ("1.0.0-0.3.7", 1, 0, 0, ("0", "3", "7"), ()),
        ("1.0.0-x.7.z.92", 1, 0, 0, ("x", "7", "z", "92"), ()),
        ("1.0.0-x-y-z.--", 1, 0, 0, ("x-y-z", "--"), ()),
        ("1.0.0+20130313144700", 1, 0, 0, (), ("20130313144700",)),
        ("1.0.0-beta+exp.sha.5114f85", 1, 0, 0, ("beta",), ("exp", "sha", "5114f85")),
        ("1.0.0+21AF26D3----117B344092BD", 1, 0, 0, (), ("21AF26D3----117B344092BD",)),
        ("1.0.0+001", 1, 0, 0, (), ("001",)),  # leading zeros are fine in build metadata
        ("18446744073709551615.0.0", 2**64 - 1, 0, 0, (), ()),
    ],
)
def test_parses_valid_versions(
    text: str, major: int, minor: int, patch: int, pre: tuple[str, ...], build: tuple[str, ...]
) -> None:
    version = parse_version(text)
    assert (version.major, version.minor, version.patch) == (major, minor, patch)
    assert version.prerelease == pre
    assert version.build == build
    assert str(version) == text
    assert is_valid_version(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "1",
        "1.2",
        "1.2.3.4",
        "01.2.3",
        "1.02.3",
        "1.2.03",
        "v1.2.3",
        " 1.2.3",
        "1.2.3 ",
        "1.2.3\n",
        "1.2.3-",
        "1.2.3+",
        "1.2.3-alpha+",
        "1.2.3-01",
        "1.2.3-a..b",
        "1.2.3+a..b",
        "1.2.3-a_b",
        "1.2.3+bé",
        "\uff11.2.3",  # a full-width digit is not an ASCII digit
        "-1.2.3",
        "1.2.-3",
        "18446744073709551616.0.0",
    ],
)
def test_rejects_invalid_versions(text: str) -> None:
    with pytest.raises(InvalidVersion):
        parse_version(text)
    assert not is_valid_version(text)


# semver.org §11, in increasing precedence.
ORDERED = [
    "1.0.0-alpha",
    "1.0.0-alpha.1",
    "1.0.0-alpha.beta",
    "1.0.0-beta",
    "1.0.0-beta.2",
    "1.0.0-beta.11",
    "1.0.0-rc.1",
    "1.0.0",
    "2.0.0",
    "2.1.0",
    "2.1.1",
]


def test_precedence_follows_semver_org() -> None:
    versions = [parse_version(text) for text in ORDERED]
    for i, lower in enumerate(versions):
        for j, higher in enumerate(versions):
            expected = (i > j) - (i < j)
            assert lower.compare(higher) == expected, (ORDERED[i], ORDERED[j])
    shuffled = versions[:]
    random.Random(7).shuffle(shuffled)
    assert [str(v) for v in sorted(shuffled)] == ORDERED


@pytest.mark.parametrize(
    ("lower", "higher"),
    [
        ("1.0.0-1", "1.0.0-a"),  # numeric identifiers sort before alphanumeric ones
        ("1.0.0-2", "1.0.0-10"),  # numeric identifiers compare as numbers
        ("1.0.0-a10", "1.0.0-a2"),  # alphanumeric ones compare as ASCII text
        ("1.0.0-A", "1.0.0-a"),
        ("1.0.0-alpha", "1.0.0-alpha.0"),  # a longer set wins when the prefix is equal
        ("1.9.9", "1.10.0"),
        ("0.0.1-rc.1", "0.0.1"),
    ],
)
def test_precedence_details(lower: str, higher: str) -> None:
    low, high = parse_version(lower), parse_version(higher)
    assert low < high and high > low and low <= high and high >= low
    assert low.compare(high) == -1 and high.compare(low) == 1


def test_build_metadata_is_ignored_for_precedence() -> None:
    a, b = parse_version("1.0.0+build.1"), parse_version("1.0.0+build.2")
    assert a == b and hash(a) == hash(b) and a.compare(b) == 0
    assert str(a) != str(b)
    assert parse_version("1.0.0-rc.1+x") != parse_version("1.0.0+x")


def test_versions_are_immutable_and_not_equal_to_strings() -> None:
    version = parse_version("1.2.3")
    with pytest.raises(AttributeError):
        version.major = 2
    assert version != "1.2.3"
    assert version == Version(1, 2, 3)
    assert repr(version) == "Version('1.2.3')"
