"""``python -m kf_trainer_core.cli``: the ``kf-trainer`` command."""

import sys

from kf_trainer_core.cli import main

sys.exit(main())
