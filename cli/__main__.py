"""``python -m ranktop.cli``: the same as the ``ranktop`` command."""

import sys

from ranktop.cli.main import main

sys.exit(main())
