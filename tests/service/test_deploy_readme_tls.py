"""deploy/README.md's one-machine cluster with TLS and a user per team (issue 19) turns the shipped
cluster files into TLS ones with a `sed` of two patterns: this runs that very command (read from the
README) on copies of deploy/nats/, so a change of cluster-n*.conf that the patterns no longer match
(which sed would pass over in silence, leaving a cluster in clear text) is seen here, and has
nats-server check the result (`-t`) with the environment the README gives it. The whole block ran by
hand on three nodes (the README shows what it printed); it takes fixed ports, so not here."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import nkeys
import pytest

from services.common.natsserver import find_nats_server
from tests.service.throwaway_ca import make_pki

pytestmark = pytest.mark.nats  # (the nats-server executable; no server is started)

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def readme_sed() -> str:
    text = (DEPLOY / "README.md").read_text()
    section = text[text.index("### Three nodes on one machine, with TLS"):]
    block = re.findall(r"```sh\n(.*?)```", section, re.S)[0]
    [command] = re.findall(r"^sed -i .*?\.conf$", block, re.S | re.M)
    return command


def patched(tmp_path: Path) -> Path:
    """Copies of deploy/nats/*.conf in tmp_path/conf, with the README's sed run on them."""
    conf = tmp_path / "conf"
    conf.mkdir()
    for found in (DEPLOY / "nats").glob("*.conf"):
        shutil.copy(found, conf / found.name)
    subprocess.run(["bash", "-c", readme_sed().replace("/tmp/poolwise-conf/", f"{conf}/")], check=True, timeout=30)
    return conf


def check(conf: Path, n: int, tmp_path: Path, cert: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`nats-server -t` on node n's patched file, in the environment the README gives it."""
    pki = make_pki(tmp_path / f"pki-{n}")
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    env = {**os.environ, "POOLWISE_TLS_CA": str(pki.ca), "POOLWISE_TLS_CERT": str(cert or pki.server.cert),
           "POOLWISE_TLS_KEY": str(pki.server.key), "TEAM_B_NKEY": nkeys.from_seed(bytearray(seed)).public_key.decode(),
           "POOLWISE_NATS_LISTEN": "127.0.0.1:4222", "POOLWISE_NATS_HTTP": "127.0.0.1:8222",
           "POOLWISE_NATS_CLUSTER_LISTEN": "127.0.0.1:6222", "POOLWISE_NATS_STORE": str(tmp_path / "store"),
           "POOLWISE_NATS_ROUTES": "[nats-route://127.0.0.1:6222, nats-route://127.0.0.1:6223]",
           **{f"{role}_PASSWORD_BCRYPT": "pw" for role in ("SERVICE", "OPERATOR", "AUDITOR", "TEAM_A")}}
    return subprocess.run([find_nats_server(), "-t", "-c", str(conf / f"cluster-n{n}.conf")], env=env,
                          capture_output=True, text=True, timeout=30)


def test_the_readme_turns_the_cluster_files_into_tls_ones_with_the_teams(tmp_path: Path) -> None:
    conf = patched(tmp_path)
    for n in (1, 2, 3):
        text = (conf / f"cluster-n{n}.conf").read_text()
        cluster = text[text.index("cluster {"):text.index("}", text.index("cluster {"))]
        assert 'include "tls-routes.conf"' in cluster, text
        top = [line for line in text.splitlines() if line.startswith("include ")]
        assert top == ['include "teams.conf"', 'include "tls.conf"'], top
        checked = check(conf, n, tmp_path)
        assert checked.returncode == 0, checked.stderr + checked.stdout


def test_the_check_reads_the_certificates(tmp_path: Path) -> None:
    """(So that the check above can fail: `-t` reads the TLS files the config names.)"""
    checked = check(patched(tmp_path), 1, tmp_path, cert=tmp_path / "missing.pem")
    assert checked.returncode != 0 and "missing.pem" in checked.stderr + checked.stdout
