"""`python -m coordinator_server`: the same entry point as the `coordinator-server` console script."""
import sys

from coordinator_server.cli import main

sys.exit(main())
