"""The local Ray cluster of the Ray sink tests (test_ray, test_ray_tokens, test_ray_s3): two
CPUs, no dashboard, the dataset's order kept (``preserve_order``), shut down at the end. Not a
conftest.py: one here would shadow the top-level ``conftest`` the tests import from."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def ray_cluster(env: dict[str, str] | None = None) -> Iterator[None]:
    """A local Ray cluster while inside; ``env``: environment variables for its workers."""
    import ray

    extra = {} if env is None else {"runtime_env": {"env_vars": env}}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, **extra)
    ray.data.DataContext.get_current().execution_options.preserve_order = True
    try:
        yield
    finally:
        ray.shutdown()
