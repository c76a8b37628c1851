"""A stand-in for carm_advisor.trials.worker speaking its JSON-lines protocol, without Keras: it dies on
batch 64 (a crash) and hangs on mixed_float16 (a timeout); anything else gets a fixed measurement."""

import json
import os
import sys
import time

for line in sys.stdin:
    message = json.loads(line)
    if message["op"] == "init":
        reply = {"ok": True, "device": {"name": "fake worker"}}
    else:
        config = message["config"]
        if config["batch_size"] == 64:
            sys.stderr.write("fake worker: segmentation fault\n")
            sys.stderr.flush()
            os._exit(139)
        if config["precision"] == "mixed_float16":
            time.sleep(60)
        reply = {"ok": True, "measurement": {"time_s": 0.01, "energy_j": 2.0, "flops": 0.0,
                                             "batch_size": config["batch_size"], "source": "measured"}}
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()
