"""`python -m rlfactory_nb.cli`: the same as the `rlfactory-nb` command."""

import sys

from rlfactory_nb.cli import main

sys.exit(main())
