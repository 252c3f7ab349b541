"""``python -m codesign.cli``: the same as the ``codesign`` command."""

import sys

from codesign.cli import main

sys.exit(main())
