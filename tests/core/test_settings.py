"""Parsing of text settings shared by the MaxText and AXLearn shims and launchers."""

from __future__ import annotations

import pytest

from goodput_core import settings


@pytest.mark.parametrize("value, expected", [
    (True, True), (0, False), ("YES", True), (" off ", False), ("1", True), ("n", False)])
def test_parse_bool(value, expected):
    assert settings.parse_bool(value, "flag") is expected


def test_parse_bool_blank_is_an_error_unless_given_a_meaning():
    with pytest.raises(ValueError, match="flag=: expected true or false"):
        settings.parse_bool("", "flag")
    assert settings.parse_bool("", "flag", blank=False) is False
    with pytest.raises(ValueError, match="true or false"):
        settings.parse_bool("sometimes", "flag")


@pytest.mark.parametrize("value, expected", [(3, 3), (4.0, 4), (" 7 ", 7)])
def test_parse_positive_int(value, expected):
    assert settings.parse_positive_int(value, "n") == expected


@pytest.mark.parametrize("value", [0, -1, 1.5, "x", True, None])
def test_parse_positive_int_rejects(value):
    with pytest.raises(ValueError, match="n="):
        settings.parse_positive_int(value, "n")


def test_parse_window_sizes_keeps_order_and_drops_duplicates():
    assert settings.parse_window_sizes("3600, 60,,3600", "w") == (3600, 60)
    assert settings.parse_window_sizes([60, 60.0], "w") == (60,)
    assert settings.parse_window_sizes(None, "w") == () == settings.parse_window_sizes(" ", "w")
    with pytest.raises(ValueError, match="w=-5: expected a positive integer"):
        settings.parse_window_sizes("60,-5", "w")


@pytest.mark.parametrize("value, expected", [
    (None, None), ("", None), ("off", None), ("None", None), (-1, None), (0, 0), ("9100", 9100)])
def test_parse_port(value, expected):
    assert settings.parse_port(value, "p") == expected


@pytest.mark.parametrize("value", [9431, "9431", 65536, "http", True])
def test_parse_port_rejects_orbax_port_and_nonsense(value):
    with pytest.raises(ValueError, match="p="):
        settings.parse_port(value, "p")


def test_parse_seconds():
    assert settings.parse_seconds("1.5", "s") == 1.5
    assert settings.parse_seconds(None, "s") is None
    assert settings.parse_seconds(0, "s", zero_is_unset=True) is None
    for bad in (0, -1, "inf", "fast", True):
        with pytest.raises(ValueError, match="s="):
            settings.parse_seconds(bad, "s")
