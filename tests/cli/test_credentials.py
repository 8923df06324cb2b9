"""The CLI's credentials and TLS options (`poolwise --creds FILE ...`, `NATS_CREDS`, ...): a
missing or bad file is one line naming the option, exit 2, before anything connects."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.common.connection import ENV
from tests.cli.helpers import one_error_line, run_here


@pytest.fixture(autouse=True)
def no_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """None inherited; the CLI puts what it is given in the environment: undone after each test."""
    for name in ENV.values():
        monkeypatch.setenv(name, "")  # recorded as it was (absent or set), restored after the test
        monkeypatch.delenv(name)


@pytest.mark.parametrize(("option", "message"), [
    ("--creds", "--creds (NATS_CREDS): no such file"),
    ("--nkey", "--nkey (NATS_NKEY): no such file"),
    ("--tls-ca", "--tls-ca (NATS_CA): no such file"),
    ("--tls-cert", "--tls-cert (NATS_CERT): no such file"),
])
def test_a_missing_file_is_one_line_naming_the_option(option: str, message: str, tmp_path: Path,
                                                      capfd: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    line = one_error_line(run_here(capfd, monkeypatch, option, str(tmp_path / "missing"), "gangs"))
    assert message in line, line


def test_a_bad_file_from_the_environment_is_named(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ca.pem").write_text("not a certificate\n")
    monkeypatch.setenv("NATS_CA", str(tmp_path / "ca.pem"))
    line = one_error_line(run_here(capfd, monkeypatch, "gangs"))
    assert "--tls-ca (NATS_CA)" in line and "holds no CA certificate" in line, line


def test_a_key_without_its_certificate_is_refused(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "key.pem").write_text("x\n")
    line = one_error_line(run_here(capfd, monkeypatch, "--tls-key", str(tmp_path / "key.pem"), "gangs"))
    assert "--tls-key (NATS_KEY) given without --tls-cert (NATS_CERT)" in line, line
