"""The runtime layer: builds a fleet of crawler nodes from the plan, in Ray actors
(runtime/ray_backend.py) or in this process (runtime/inprocess.py), behind one interface
(runtime/fleet.py); and the process environment Ray and Prefect start in
(runtime/environment.py). Prefect tasks, tests and benchmarks reach Ray only through it.

Imports nothing itself: the CLI imports `runtime.environment` before anything else."""
