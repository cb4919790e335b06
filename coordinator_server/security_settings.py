"""Build the security objects of a server from its settings: TLS context, SASL config, authorizer.
Errors here are start-up errors (unreadable certificate, invalid users or ACL file)."""
from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from coordinator_server.config import Config
from coordinator_server.security.acls import parse_acls
from coordinator_server.security.auth_throttle import AuthFailureThrottle
from coordinator_server.security.authorizer import Authorizer
from coordinator_server.security.files import ReloadingFile
from coordinator_server.security.listeners import ListenerSpec, parse_listeners, server_ssl_context
from coordinator_server.security.sasl import SaslConfig, parse_mechanisms
from coordinator_server.security.users import parse_users


@dataclass(frozen=True)
class SecuritySettings:
    listeners: tuple[ListenerSpec, ...]
    ssl: ssl.SSLContext | None
    client_auth: bool
    sasl: SaslConfig | None
    authorizer: Authorizer | None


def build_security(c: Config) -> SecuritySettings:
    specs = parse_listeners(c.listeners) if c.listeners else (ListenerSpec("PLAINTEXT", c.host, c.port),)
    tls = None
    if any(s.tls for s in specs):
        try:
            tls = server_ssl_context(c.tls_cert or "", c.tls_key or "", c.tls_ca)
        except (OSError, ssl.SSLError) as e:
            raise ValueError(f"cannot load the TLS certificate/key/CA: {e}") from e
    sasl = None
    if any(s.sasl for s in specs):
        users_path = Path(c.sasl_users_file or "")
        try:
            users = ReloadingFile(users_path, parse_users, "sasl_users")
        except (OSError, ValueError) as e:
            raise ValueError(f"cannot read the SASL users file {users_path}: {e}") from e
        sasl = SaslConfig(parse_mechanisms(c.sasl_enabled_mechanisms), users,
                          c.connections_failed_authentication_delay_ms,
                          AuthFailureThrottle(c.connections_failed_authentication_delay_ms,
                                              c.failed_authentication_max_delay_ms,
                                              c.failed_authentication_max_tracked))
    authorizer = None
    if c.acl_file:
        acl_path = Path(c.acl_file)
        try:
            acls = ReloadingFile(acl_path, parse_acls, "acls")
        except (OSError, ValueError) as e:
            raise ValueError(f"cannot read the ACL file {acl_path}: {e}") from e
        supers = [p.strip() for p in (c.super_users or "").split(";") if p.strip()]
        authorizer = Authorizer(acls, supers, c.allow_everyone_if_no_acl_found)
    return SecuritySettings(specs, tls, bool(c.tls_ca), sasl, authorizer)
