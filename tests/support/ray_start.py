"""One local Ray for the tests that need it (sharded search, Ray Serve), started with Serve's proxy timeouts
raised: on a loaded 2-core CI box its HTTP proxy took longer than the default 5 s ready check, Serve killed it and
``serve.start`` failed with ActorDiedError."""
from __future__ import annotations

import os
from typing import Any

# Seconds; read by Serve's controller, which inherits this process's environment when ray.init starts the cluster.
SERVE_PROXY_TIMEOUTS_S = {"RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "60", "RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S": "60"}


def start_local_ray(ray: Any) -> None:
    """``ray.init`` of a 2-CPU local cluster without dashboard or driver logs, Serve's proxy timeouts raised (a value
    already set in the environment is kept)."""
    for name, seconds in SERVE_PROXY_TIMEOUTS_S.items():
        os.environ.setdefault(name, seconds)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
