"""TLS material for the tests: a throwaway CA, server and client certificates signed by it.

Made with the machine's ``openssl`` (a missing one skips the test, or fails it in CI: see
`binaries`), in a folder of the test's own, valid for a week.
"""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from binaries import need_binary

from redis_presence.localserver import LocalServerError, options_argv


@dataclass(frozen=True)
class TlsFiles:
    """A throwaway CA, a server certificate signed by it (valid for 127.0.0.1, localhost) and
    a client certificate signed by it (for servers with ``tls-auth-clients yes``)."""

    ca_cert: Path
    ca_key: Path
    cert: Path
    key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str) -> None:
    binary = need_binary("openssl")
    done = subprocess.run(
        [binary, *args], stdin=subprocess.DEVNULL, capture_output=True, check=False
    )
    if done.returncode != 0:
        output = (done.stdout + done.stderr).decode(errors="replace")
        raise LocalServerError(
            f"openssl {' '.join(args[:2])} failed ({done.returncode}):\n{output}"
        )


_EC_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


def make_ca(dir: Path, *, cn: str = "redis-presence test CA") -> tuple[Path, Path]:
    """Create a fresh self-signed CA in ``dir``; return ``(cert, key)``.

    Call it again with another ``dir`` for an unrelated CA (for "wrong CA is refused" tests).
    """
    dir.mkdir(parents=True, exist_ok=True)
    cert, key, config = dir / "ca.crt", dir / "ca.key", dir / "ca.cnf"
    # Our own config, so the result does not depend on the distribution's openssl.cnf; the
    # extensions satisfy the VERIFY_X509_STRICT check that Python 3.13 turns on by default.
    config.write_text(
        "[req]\nprompt = no\ndistinguished_name = dn\nx509_extensions = v3_ca\n"
        f"[dn]\nCN = {cn}\n"
        "[v3_ca]\nbasicConstraints = critical, CA:TRUE\n"
        "keyUsage = critical, keyCertSign, cRLSign\n"
        "subjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid:always\n"
    )
    options = {"-config": config, "-days": 7, "-keyout": key, "-out": cert}
    _openssl("req", "-x509", "-new", *_EC_KEY, *options_argv(options))
    return cert, key


def issue_cert(
    dir: Path,
    name: str,
    *,
    ca: tuple[Path, Path],
    cn: str,
    usage: str,
    alt_names: Sequence[str] = (),
) -> tuple[Path, Path]:
    """Create ``<name>.crt`` and ``<name>.key`` in ``dir``, signed by ``ca = (cert, key)``.

    ``usage`` is the extendedKeyUsage (``serverAuth``, ``clientAuth``); returns ``(cert, key)``.
    """
    dir.mkdir(parents=True, exist_ok=True)
    cert, key, csr, config = (dir / f"{name}.{ext}" for ext in ("crt", "key", "csr", "cnf"))
    alt = f"subjectAltName = {', '.join(alt_names)}\n" if alt_names else ""
    config.write_text(
        f"[req]\nprompt = no\ndistinguished_name = dn\n[dn]\nCN = {cn}\n"
        "[v3_leaf]\nbasicConstraints = critical, CA:FALSE\n"
        "keyUsage = critical, digitalSignature\n"
        f"extendedKeyUsage = {usage}\n{alt}"
        "subjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid, issuer\n"
    )
    _openssl(
        "req", "-new", *_EC_KEY, *options_argv({"-config": config, "-keyout": key, "-out": csr})
    )
    signing = {
        "-in": csr,
        "-CA": ca[0],
        "-CAkey": ca[1],
        "-set_serial": secrets.randbits(63) + 1,
        "-days": 7,
        "-extfile": config,
        "-extensions": "v3_leaf",
        "-out": cert,
    }
    _openssl("x509", "-req", *options_argv(signing))
    return cert, key


def make_client_cert(
    dir: Path, *, ca: tuple[Path, Path], cn: str = "redis-presence test client"
) -> tuple[Path, Path]:
    """A client certificate signed by ``ca = (cert, key)``, in ``dir``; returns ``(cert, key)``."""
    return issue_cert(dir, "client", ca=ca, cn=cn, usage="clientAuth")


def make_tls_files(dir: Path, *, cn: str = "localhost") -> TlsFiles:
    """Create in ``dir`` a CA, a server certificate for ``cn``, 127.0.0.1 and localhost, and a
    client certificate, both signed by that CA."""
    ca = make_ca(dir)
    names = dict.fromkeys(["IP:127.0.0.1", "DNS:localhost", f"DNS:{cn}"])
    cert, key = issue_cert(
        dir, "server", ca=ca, cn=cn, usage="serverAuth, clientAuth", alt_names=list(names)
    )
    client_cert, client_key = make_client_cert(dir, ca=ca)
    return TlsFiles(
        ca_cert=ca[0],
        ca_key=ca[1],
        cert=cert,
        key=key,
        client_cert=client_cert,
        client_key=client_key,
    )
