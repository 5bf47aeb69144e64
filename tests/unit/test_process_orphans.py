"""Starting a stack's processes: every start works beside a gRPC server, and the processes die with
the one that started them, even when it is SIGKILLed (no chance to stop them by PID): a killed
`graystack up` or test run leaves nothing holding its ports."""

import asyncio
import os
import signal
import subprocess
import sys
import time

import grpc
import pytest

from graystack.local.processes import start_process, wait_until

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


async def test_children_started_beside_a_grpc_server_all_start(tmp_path):
    # With a preexec_fn, Popen forked and gRPC's fork handlers restarted its poller in the child, which
    # aborted about 1 start in 100 (measured: 14 of 1,500) when Popen closed the child's descriptors:
    # an Envoy that died at birth. 300 starts catch that with a chance of about 95 %.
    server = grpc.aio.server()
    server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        failed = []
        for i in range(300):
            child = start_process(f"true-{i}", ["true"], tmp_path)
            if await asyncio.to_thread(child.popen.wait, 10) != 0:
                failed.append(child.log())
        assert failed == [], failed[0]
    finally:
        await server.stop(None)


def test_a_program_that_is_not_there_fails_in_the_caller(tmp_path):
    with pytest.raises(FileNotFoundError, match="no-such-program"):
        start_process("missing", ["no-such-program", "--flag"], tmp_path)
