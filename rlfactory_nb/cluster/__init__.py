"""Ray at the edge: connecting a kernel to a cluster, and training jobs that run on it."""

from rlfactory_nb.cluster.jobs import JobExistsError, JobFailed, TrainingJob, launch
from rlfactory_nb.cluster.ray_cluster import Cluster, ClusterResources, NodeInfo
from rlfactory_nb.cluster.run_folder import RunFolder

__all__ = ["Cluster", "ClusterResources", "JobExistsError", "JobFailed", "NodeInfo", "RunFolder", "TrainingJob", "launch"]
