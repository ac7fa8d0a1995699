"""A rank whose forked child (as a DataLoader worker would be) keeps calling the probe."""

import os
import time

from ranktop import probe

probe.init()
pid = os.fork()
if pid == 0:  # the child: must stay silent
    for n in range(1000, 1400):
        with probe.step(n):
            with probe.phase("forward"):
                time.sleep(0.005)
    os._exit(0)
for n in range(1500):  # about 8 s: long enough for a viewer started after it on a busy machine
    with probe.step(n):
        with probe.phase("forward"):
            time.sleep(0.005)
os.waitpid(pid, 0)
probe.shutdown()
