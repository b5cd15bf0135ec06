"""`python -m commitlog.tool`: the `commitlog` command."""

import sys

from .command import main

sys.exit(main())
