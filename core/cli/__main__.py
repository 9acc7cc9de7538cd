"""``python -m core.cli``: core's command line, without the screens."""

from __future__ import annotations

import sys

from core.cli.app import main

sys.exit(main())
