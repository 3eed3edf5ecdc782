"""Hand-written vectors for every normalization rule of SPEC §2."""

from __future__ import annotations

import os

import pytest

from ml8s.errors import ConfigError
from ml8s.identity.uri import parse_root_uri
from ml8s.identity.variables import normalize_value


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("  abc  ", "abc"),
        ("\tabc\n", "abc"),
        ("", None),
        ("   ", None),
        ("true", True),
        ("TRUE", True),
        (" False ", False),
        ("tRuE", True),
        ("yes", "yes"),
        ("0", 0),
        ("-0", 0),
        ("42", 42),
        ("-17", -17),
        ("0.2", 0.2),
        ("1e-3", 0.001),
        ("1E+2", 100.0),
        ("2.50", 2.5),
        ("007", "007"),
        ("+1", "+1"),
        ("1_000", "1_000"),
        ("nan", "nan"),
        ("inf", "inf"),
        ("-inf", "-inf"),
        ("0x10", "0x10"),
        ("1.", "1."),
        (".5", ".5"),
        ("1e", "1e"),
        ("b,a", ["a", "b"]),
        (" b , a ,, a ", ["a", "b"]),
        ("1,2", ["1", "2"]),
        ("true,false", ["false", "true"]),
        (",", None),
        (" , ,", None),
        ("a,", ["a"]),
        ("Z,a,_", ["Z", "_", "a"]),
        ("é,e,ß", ["e", "ß", "é"]),
        ("ünïcode", "ünïcode"),
    ],
)
def test_normalize_value(raw: str, expected: object) -> None:
    got = normalize_value(raw)
    assert got == expected
    assert type(got) is type(expected)


def test_float_overflow_is_rejected() -> None:
    with pytest.raises(ConfigError, match="LEARNING_RATE"):
        normalize_value("1e999", name="LEARNING_RATE")


def test_an_integer_of_thousands_of_digits_is_a_config_error() -> None:
    # int() refuses more than 4300 digits: this was an INTERNAL_ERROR (ValueError) of `ml8s identity`/`run`
    with pytest.raises(ConfigError, match=r"EPOCHS is a whole number of 5,000 digits; expected at most 4,300"):
        normalize_value("9" * 5000, name="EPOCHS")
    assert normalize_value("9" * 4300, name="EPOCHS") == int("9" * 4300)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (" 3 ", 3),
        ("99999999999", 99999999999),
        ("head", "head"),
        ("123456789012", "123456789012"),  # 12 digits: a block hash's prefix, not a version
        ("1234e5678901", "1234e5678901"),  # was a float out of range: CONFIG_ERROR for a real block hash
        ("100000000e10", "100000000e10"),  # was 1e+18, reported as WARM_START='1e+18'
        ("-1", "-1"),
        ("0", "0"),
        ("true", "true"),
    ],
)
def test_warm_start_is_its_text_or_a_version_number(raw: str, expected: object) -> None:
    """WARM_START names a version (a number) or a block hash; hex digits that read as a number stay text."""
    got = normalize_value(raw, name="WARM_START")
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("/data/x", "file:///data/x"),
        ("/data/x/", "file:///data/x"),
        ("file:///data/x/", "file:///data/x"),
        ("file:///data/./y/../x", "file:///data/x"),
        ("/data//x", "file:///data/x"),
        ("s3://bucket/prefix/", "s3://bucket/prefix"),
        ("s3://bucket/prefix//", "s3://bucket/prefix"),
        ("s3://bucket", "s3://bucket"),
        ("/", "file:///"),
    ],
)
def test_data_root_spellings(raw: str, expected: str) -> None:
    assert normalize_value(raw, name="DATA_ROOT") == expected


def test_relative_data_root_is_made_absolute(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(str(tmp_path))
    here = os.getcwd()
    assert normalize_value(" data/ ", name="DATA_ROOT") == f"file://{here}/data"
    assert normalize_value("./data/../data", name="DATA_ROOT") == f"file://{here}/data"
    # ``file://data`` names the host "data", not ./data: refused, not guessed (tests/test_uri.py)
    with pytest.raises(ConfigError, match="names the host 'data'"):
        normalize_value("file://data", name="DATA_ROOT")


def test_symlinks_are_not_resolved(tmp_path: os.PathLike[str]) -> None:
    real = os.path.join(tmp_path, "real")
    link = os.path.join(tmp_path, "link")
    os.mkdir(real)
    os.symlink(real, link)
    assert parse_root_uri(link, variable="DATA_ROOT").uri == f"file://{link}"


def test_other_variables_keep_slashes() -> None:
    assert normalize_value("a/b/", name="TARGET_COLUMN") == "a/b/"
