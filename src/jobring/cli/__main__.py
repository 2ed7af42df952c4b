"""`python -m jobring.cli`."""

import sys

from jobring.cli import main

sys.exit(main())
