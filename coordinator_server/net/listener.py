"""What a connection needs to know about the listener it came in on (Kafka's ListenerName): where
clients reach this listener, TLS, SASL and the authorizer, and who a connection is before any SASL."""
from __future__ import annotations

import ssl
from dataclasses import dataclass

from coordinator_server.security.authorizer import ANONYMOUS, Authorizer
from coordinator_server.security.listeners import peer_cert_cn
from coordinator_server.security.sasl import SaslConfig

from .handlers import BrokerEndpoint


@dataclass(slots=True)
class ListenerContext:
    name: str  # PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
    endpoint: BrokerEndpoint  # advertised by Metadata/FindCoordinator to requests of this listener
    ssl: ssl.SSLContext | None = None
    client_auth: bool = False  # TLS client certificates required (--tls-ca)
    sasl: SaslConfig | None = None
    authorizer: Authorizer | None = None

    def transport_principal(self, peercert: dict[str, object] | None) -> str:
        """The principal before SASL: the client certificate's CN on an SSL listener with client auth
        (not on SASL_SSL, where SASL decides), else User:ANONYMOUS."""
        if self.client_auth and self.sasl is None:
            cn = peer_cert_cn(peercert)
            if cn:
                return f"User:{cn}"
        return ANONYMOUS
