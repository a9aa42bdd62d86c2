"""goodput_core.redact: the one rule every URL, DSN, header and endpoint passes
before it is shown (expected texts written by hand from the rule)."""

import logging

import pytest

from goodput_core import redact as redact_module
from goodput_core.redact import (
    RedactingFilter, guard_loggers, header_secrets, is_keyword_dsn, keyword_dsn, redact,
    remember, secrets_of)


@pytest.mark.parametrize("given, shown", [
    # database URLs: the role stays, the password goes (user part and parameter)
    ("postgresql://u:p%40ss@h:5/db?schema=s", "postgresql://u:***@h:5/db?schema=s"),
    ("postgres://h/db", "postgres://h/db"),
    ("postgresql://u@h/db?password=pw1&sslmode=require",
     "postgresql://u@h/db?password=***&sslmode=require"),
    ("postgresql:///db?sslpassword=k3y", "postgresql:///db?sslpassword=***"),
    # a password with ? # @ in it, unencoded: hidden whole (user part ends at the last @)
    ("postgresql://u:a?b#c@d@h:5/db", "postgresql://u:***@h:5/db"),
    ("postgresql://u:pw@h1:1,h2:2/db", "postgresql://u:***@h1:1,h2:2/db"),
    # endpoints: the whole user part (a bare TOKEN@ is a token)
    ("http://user:PW@collector:4318", "http://***@collector:4318"),
    ("https://TOKEN123@collector/v1", "https://***@collector/v1"),
    ("http://collector:4318/v1/metrics?api_key=abcd&x=1",
     "http://collector:4318/v1/metrics?api_key=***&x=1"),
    # not secrets: left alone
    ("sqlite:///home/u@x/p.sqlite", "sqlite:///home/u@x/p.sqlite"),
    ("http://host:4318/a/b@c", "http://host:4318/a/b@c"),
    ("/tmp/goodput.sqlite", "/tmp/goodput.sqlite"),
    ("password authentication failed for user \"u\"",
     "password authentication failed for user \"u\""),
])
def test_urls(given, shown):
    assert redact(given) == shown


def test_keyword_dsns_and_free_text():
    assert redact("host=h port=5 password=PW1 dbname=d") == "host=h port=5 password=*** dbname=d"
    assert redact("host=h password='a b\\'c' dbname=d") == "host=h password=*** dbname=d"
    # URLs inside a message, quoted as repr() quotes them
    assert redact("cannot open 'postgresql://u:PW2@h/db': refused") == \
        "cannot open 'postgresql://u:***@h/db': refused"
    assert redact("Header invalid: authorization:Bearer%20S3") == \
        "Header invalid: authorization:***"
    assert redact("Authorization: Bearer tok3n here") == "Authorization: *** here"
    assert redact(ValueError("at http://a:b@h")) == "at http://***@h"


def test_secrets_given_are_scrubbed_literally(monkeypatch):
    monkeypatch.setattr(redact_module, "_remembered", set())
    remember("pw", "long-secret/x")
    assert redact("driver said: long-secret/x and long-secret%2Fx") == \
        "driver said: *** and ***"
    assert redact("pw stays: too short to scrub") == "pw stays: too short to scrub"
    assert redact("the store s3cret-9 fails", extra=["s3cret-9"]) == "the store *** fails"


def test_otlp_header_variables(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization:Bearer%20S3CRET-1,"
                       "x-key=v%C3%A9rit%C3%A9,x=y\nz-hidden")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "api=tr4ces")
    assert header_secrets("a=1,b, c d=e ,f=g h") == ["1", "b", "c d=e", "e", "f=g h", "g h"]
    text = redact("warning: authorization:Bearer%20S3CRET-1 | vérité | v%C3%A9rit%C3%A9 | "
                  "y\nz-hidden | tr4ces")
    for secret in ("S3CRET-1", "vérité", "v%C3%A9rit%C3%A9", "z-hidden", "tr4ces"):
        assert secret not in text


def test_keyword_dsn_parsing():
    assert keyword_dsn("host=h  port = 5 password='a b\\'c'") == [
        ("host", "h"), ("port", "5"), ("password", "a b'c")]
    assert is_keyword_dsn("host=/tmp dbname=x")
    for path in ("x.sqlite", "a=b.sqlite", "runs/x=1.sqlite", "host=h password='open",
                 "sqlite:///host=x"):
        assert not is_keyword_dsn(path), path


def test_secrets_of():
    assert set(secrets_of("postgresql://u:p%40ss@h/db?password=two")) == {"p%40ss", "p@ss", "two"}
    assert set(secrets_of("host=h password=PW user=u")) == {"PW"}
    assert set(secrets_of("http://tok@h:1")) == {"tok"}


def test_the_filter_rewrites_records_of_every_guarded_logger(capsys):
    name = "goodput-test-lib.sub.module"
    logger = logging.getLogger(name)
    guard_loggers(("goodput-test-lib",))
    assert any(isinstance(f, RedactingFilter) for f in logger.filters)
    handler = logging.StreamHandler()
    logger.addHandler(handler)
    try:
        logger.propagate = False
        logger.warning("export to %s failed", "http://u:PW9@h:1")
        try:
            raise RuntimeError("boom at postgresql://u:PW9@h/db")
        except RuntimeError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    err = capsys.readouterr().err
    assert "PW9" not in err and "http://***@h:1" in err and "u:***@h/db" in err
