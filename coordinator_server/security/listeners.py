"""Kafka's `listeners` syntax and the TLS context of the SSL / SASL_SSL listeners.

`--listeners PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9094`: one port per listener. Unlike Kafka we
accept only the four standard names (a listener's name *is* its security protocol), so there is no
`listener.security.protocol.map` to get wrong.
"""
from __future__ import annotations

import re
import ssl
from dataclasses import dataclass

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_LISTENER = re.compile(r"^(?P<name>[A-Za-z_]+)://(?P<host>\[[^\]]*\]|[^:/\[\]]*):(?P<port>\d+)$")


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    name: str  # == the security protocol
    host: str  # "" binds every interface
    port: int

    @property
    def tls(self) -> bool:
        return self.name in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.name in ("SASL_PLAINTEXT", "SASL_SSL")

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def parse_listeners(text: str) -> tuple[ListenerSpec, ...]:
    """`NAME://HOST:PORT[,NAME://HOST:PORT...]`; raises ValueError naming the bad entry."""
    specs: list[ListenerSpec] = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        m = _LISTENER.match(entry)
        if m is None:
            raise ValueError(f"listener {entry!r} is not NAME://HOST:PORT")
        name = m["name"].upper()
        if name not in SECURITY_PROTOCOLS:
            raise ValueError(f"listener {entry!r}: name must be one of {', '.join(SECURITY_PROTOCOLS)}")
        port = int(m["port"])
        if port > 65535:
            raise ValueError(f"listener {entry!r}: port out of range")
        if any(s.name == name for s in specs):
            raise ValueError(f"listener name {name} appears twice (Kafka requires unique names)")
        specs.append(ListenerSpec(name, m["host"].strip("[]"), port))
    if not specs:
        raise ValueError("no listener given")
    return tuple(specs)


def server_ssl_context(cert: str, key: str, ca: str | None) -> ssl.SSLContext:
    """TLS 1.2+ with the cert chain; with a CA file, a client certificate signed by it is required
    (Kafka's ssl.client.auth=required) and its subject CN becomes the principal."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    if ca:
        ctx.load_verify_locations(cafile=ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def peer_cert_cn(peercert: dict[str, object] | None) -> str | None:
    """The subject CN of a verified client certificate (`ssl.SSLObject.getpeercert()` form)."""
    if not peercert:
        return None
    subject = peercert.get("subject") or ()
    for rdn in subject:  # type: ignore[attr-defined]
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None
