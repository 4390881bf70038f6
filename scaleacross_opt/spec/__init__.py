"""pydantic v2 schemas of every input and output file (JSON Schema via ``schema_export``)."""

from .cluster import Building, Cluster, Link, Route
from .gpu import GpuSpec
from .instance import Instance, SearchSpace
from .job import Job, Precision
from .model import ModelSpec, MoeSpec
from .network import (
    CollectiveAlgorithm,
    CongestionControl,
    LoadBalancing,
    LossRecovery,
    NetworkConfig,
    TrafficClass,
    TrafficClassConfig,
)
from .plan import BuildingShare, CrossBuilding, DpSync, Placement, Plan, Recompute

__all__ = [
    "Building", "BuildingShare", "Cluster", "CollectiveAlgorithm", "CongestionControl", "CrossBuilding", "DpSync",
    "GpuSpec", "Instance", "Job", "Link", "LoadBalancing", "LossRecovery", "ModelSpec", "MoeSpec",
    "NetworkConfig", "Placement", "Plan", "Precision", "Recompute", "Route", "SearchSpace", "TrafficClass",
    "TrafficClassConfig",
]
