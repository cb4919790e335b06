"""Who may connect and what they may do: listeners and TLS (`listeners`), SASL PLAIN/SCRAM
(`scram`, `users`, `sasl`), and ACLs (`acls`, `authorizer`). See docs/security.md."""
