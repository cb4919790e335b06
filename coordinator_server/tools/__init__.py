"""Operator tools behind `coordinator-server <subcommand>`: groups, dump-log."""
