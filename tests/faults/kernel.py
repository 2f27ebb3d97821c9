"""Stands in for a notebook kernel: connects to a running Ray, launches a detached training job,
says so, and waits to be killed. Usage: python kernel.py RAY_ADDRESS CONFIG_JSON"""

import json
import sys
import time

from rlfactory_nb.cluster import Cluster, launch
from rlfactory_nb.config import RunConfig

if __name__ == "__main__":
    cluster = Cluster.connect(sys.argv[1])
    job = launch(RunConfig.from_dict(json.loads(sys.argv[2])), cluster, linger_s=60)
    print(f"launched {job.name}", flush=True)
    time.sleep(3600)
