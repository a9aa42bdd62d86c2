"""``goodput --version``, and what a user is told about a store file that is
damaged or not a store at all (advice for that file, its path printed once
with one leading slash), in a real ``goodput`` process."""

from __future__ import annotations

from importlib import metadata

from goodput_core.stores import StoreError, open_store
from tests.support.cli_process import goodput


def test_version_is_the_installed_distributions():
    proc = goodput("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"goodput {metadata.version('goodput-core')}"


def test_a_corrupt_store_file_gets_advice_for_a_corrupt_file(tmp_path):
    path = tmp_path / "y.sqlite"
    path.write_bytes(b"this is not a database, just some text " * 40)
    for url in (f"sqlite:///{path}", str(path)):  # sqlite:////tmp/...: four slashes
        proc = goodput("report", "r", "--store", url)
        assert proc.returncode != 0
        err = proc.stderr
        assert "file is not a database" in err and "damaged" in err, err
        assert "writable location" not in err
        assert f"'{path}'" in err and f"'/{path}'" not in err  # no doubled slash
    # a program opening it (a recorder's writer thread does) is told the same
    try:
        open_store(f"sqlite:///{path}")
    except StoreError as exc:
        message = str(exc)
    assert "damaged" in message and f"'/{path}'" not in message


def test_a_missing_store_is_printed_with_one_leading_slash(tmp_path):
    try:
        open_store(f"sqlite:///{tmp_path}/nope.sqlite", create=False)
    except StoreError as exc:
        message = str(exc)
    assert f"'{tmp_path}/nope.sqlite'" in message and f"'/{tmp_path}" not in message
