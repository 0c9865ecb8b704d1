"""A Ray cluster of several nodes on one machine, as a real cluster is laid out: a head node and worker nodes, each
with its own raylet and object store, joined by the head's address (what `--ray-address` names).

The nodes offer the custom resources that place the run's actors (alignment/ray/cluster.py): the head offers
`learner` (the learner, or the colocated worker), each worker node `generator` (one generator per unit). On a real
cluster the same is done with `ray start --head --resources '{"learner": 1}'` and
`ray start --address HEAD:PORT --resources '{"generator": 1}'` on the other machines.

Token authentication (on by default in this Ray): every node and the driver must present the cluster's token. On one
machine they all read the same ~/.ray/auth_token; here each cluster gets a token of its own in RAY_AUTH_TOKEN, which
the node processes (and, through this process's environment, the driver) inherit.
"""

import os
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from alignment.ray.env import ray

TOKEN_ENV = "RAY_AUTH_TOKEN"
NODE_STARTS = 3  # a node that does not come up (its agents slow to start on a loaded machine) is tried again


@dataclass
class LocalCluster:
    """The head's address and the worker nodes by name (`node 1`, `node 2`, ...), for removing one mid-run."""

    address: str
    token: str
    cluster: object  # ray.cluster_utils.Cluster
    workers: dict[str, object] = field(default_factory=dict)  # name -> ray's Node

    def remove(self, name: str) -> None:
        """Take a worker node away as a preempted machine goes: its raylet and every process on it end."""
        self.cluster.remove_node(self.workers.pop(name), allow_graceful=False)

    def add(self, name: str, cpus: float = 1, generators: int = 1, object_store_mb: int = 150) -> None:
        """A worker node joining mid-run (a preempted machine's replacement), offering `generators` units."""
        self.workers[name] = _add(
            self.cluster,
            num_cpus=cpus,
            resources={"generator": generators},
            object_store_memory=object_store_mb * 1024**2,
        )

    def name_of(self, node_id: str) -> str | None:
        """The worker node with this id (None: the head, or a node gone)."""
        return next((name for name, node in self.workers.items() if node.node_id == node_id), None)

    def node_ids(self) -> dict[str, str]:
        return {name: node.node_id for name, node in self.workers.items()}


def _add(cluster, **node_args):
    for attempt in range(NODE_STARTS):
        try:
            return cluster.add_node(**node_args)
        except Exception:  # Ray raises a bare Exception when a node's raylet does not register in time
            if attempt == NODE_STARTS - 1:
                raise
            time.sleep(2)


@contextmanager
def local_cluster(
    workers: int = 2,
    head_cpus: float = 1,
    worker_cpus: float = 1,
    generators_per_node: int = 1,
    object_store_mb: int = 150,
) -> Iterator[LocalCluster]:
    """Start a head and `workers` worker nodes (each a raylet of its own) with a fresh token; stop them all after.

    The driver joins with `ray.init(address=cluster.address)` (or `--ray-address`); this process's environment
    carries the token while the cluster is up."""
    from ray.cluster_utils import Cluster

    # Ray's test cluster writes its head's address where a plain ray.init() on this machine would then join it (and,
    # once it is gone, fail to): the file is put back as it was
    address_file = Path(ray._private.utils.get_ray_address_file(None))
    before = address_file.read_text() if address_file.exists() else None
    token = secrets.token_hex(32)
    saved = {k: os.environ.get(k) for k in (TOKEN_ENV, "RAY_AUTH_MODE")}
    os.environ[TOKEN_ENV], os.environ["RAY_AUTH_MODE"] = token, "token"
    _reload_auth()
    memory = object_store_mb * 1024**2
    cluster = None
    try:
        cluster = Cluster(initialize_head=False)
        _add(
            cluster,
            num_cpus=head_cpus,
            resources={"learner": 1},
            object_store_memory=memory,
            include_dashboard=False,
        )
        _put_back(address_file, before)
        handle = LocalCluster(cluster.address, token, cluster)
        for i in range(1, workers + 1):
            handle.workers[f"node {i}"] = _add(
                cluster, num_cpus=worker_cpus, resources={"generator": generators_per_node}, object_store_memory=memory
            )
        cluster.wait_for_nodes()
        yield handle
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
        _put_back(address_file, before)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _reload_auth()


def _put_back(path: Path, text: str | None) -> None:
    if text is None:
        path.unlink(missing_ok=True)
    else:
        path.write_text(text)


def _reload_auth() -> None:
    """Make this process read RAY_AUTH_MODE and the token again (Ray caches both at their first use)."""
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()
