"""``python -m splattrain`` runs the command line."""

import sys

try:
    from .cli import main

    code = main()
except KeyboardInterrupt:  # Ctrl-C before the command line took over signals
    print("stopped by SIGINT", file=sys.stderr)
    code = 130
sys.exit(code)
