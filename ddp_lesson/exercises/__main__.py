"""``python -m ddp_lesson.exercises [--check]``: generate ``exercises/`` from ``solutions/``."""

import sys

from .generate import main

sys.exit(main())
