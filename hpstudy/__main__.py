"""`python -m hpstudy` = the `hpstudy` command."""

import sys

from hpstudy.cli import hpstudy_main

sys.exit(hpstudy_main())
