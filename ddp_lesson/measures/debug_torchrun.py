"""What `14_debugging` measures in `workers/debug_torchrun.py`: not part of a DDP script.

The worker imports this module in one line, so the learner reads DDP only.
"""

import json
import os
from pathlib import Path

from ddp_lesson.reports import send_report


def met(rank, total):
    send_report(rank, port=int(os.environ["MASTER_PORT"]), total=total.item())


def read_error_file(fn):
    """Around @record: after it has written the error file, send it back."""
    def wrapper(*args):
        try:
            return fn(*args)
        except Exception:
            path = Path(os.environ["TORCHELASTIC_ERROR_FILE"])
            send_report(int(os.environ["RANK"]),
                        error_file=json.loads(path.read_text()),
                        error_path="/".join(path.parts[-3:]))
            raise
    return wrapper
