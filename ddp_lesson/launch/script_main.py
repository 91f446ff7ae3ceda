"""``python -m ddp_lesson.launch.script_main FILE ARGS``: ``python FILE ARGS``, with one difference.

``destroy_process_group()`` pauses before it returns (see
:func:`.ranks.pause_after_destroy`, a torch deadlock at teardown) in FILE's
own process and in every process its ``mp.spawn`` starts. The supervisor
runs whole scripts (:func:`.scripts.run_script`) and torchrun's workers
(:func:`.elastic.torchrun`) this way; the script sees what ``python FILE``
would give it: ``__name__ == "__main__"``, its ``__file__``, ``sys.argv``,
and its folder first on ``sys.path``.
"""

from __future__ import annotations

import os
import runpy
import sys


def main() -> None:
    from ddp_lesson.launch import ranks

    ranks.pause_after_destroy()
    ranks.spawn_with_pause()  # in the processes its mp.spawn starts, before they import FILE
    script, *args = sys.argv[1:]
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
