"""A rank whose probe breaks half-way: training must go on and finish."""

import time

from ranktop import probe

p = probe.init()
total = 0
for n in range(200):
    if n == 50:
        p.recorder.buffer = None  # an internal fault, as a bug in the probe would cause
    with probe.step():
        with probe.phase("forward"):
            total += n
            time.sleep(0.001)
print("trained", total, "probe on:", probe.get() is not None, flush=True)
