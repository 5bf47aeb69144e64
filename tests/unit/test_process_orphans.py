"""A stack's processes die with the process that started them, even when it is SIGKILLed (no chance
to stop them by PID): a killed `graystack up` or test run leaves nothing holding its ports."""

import os
import signal
import subprocess
import sys
import time

import pytest

from graystack.local.processes import wait_until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

PARENT = """
import sys
from pathlib import Path
from graystack.local.processes import start_process
child = start_process("sleeper", [sys.executable, "-c", "import time; time.sleep(120)"], Path(sys.argv[1]))
print(child.pid, flush=True)
import time; time.sleep(120)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie awaiting its reaper is gone for our purposes
        return stat.read().split(")")[-1].split()[0] != "Z"


def test_a_sigkilled_parent_takes_its_children_with_it(tmp_path):
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        child = int(parent.stdout.readline())
        assert alive(child)
        time.sleep(0.2)  # the parent idles, as a supervisor does
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        wait_until(lambda: not alive(child), 10, f"the child (pid {child}) to die with its parent")
    finally:
        parent.kill()
        parent.wait(timeout=10)
