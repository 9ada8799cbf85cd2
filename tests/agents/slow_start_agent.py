"""An agent slow to start, as opencode is (it answers ``initialize`` some 10 to 13 s after its
start): it sleeps ``argv[1]`` seconds before it reads its stdin, then serves the demo agent.

``python slow_start_agent.py SECONDS``; ``tests/test_check_reports.py`` runs it under the checker's
``--start-timeout``.
"""

import sys
import time

time.sleep(float(sys.argv[1]))  # the start-up work: nothing is read or written meanwhile

from acp_trio.demo.agent import main  # noqa: E402  (imported after the delay: part of the start)

main()
