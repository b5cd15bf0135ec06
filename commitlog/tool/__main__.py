"""`python -m commitlog.tool`: the `commitlog` command."""

import sys

from .cli import main

sys.exit(main())
