"""`python -m vm.cli`: the same as the `ltvm` console script."""

import sys

from vm.cli import main

sys.exit(main())
