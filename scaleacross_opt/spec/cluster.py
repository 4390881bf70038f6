"""Cluster description: buildings of GPUs and the links between them.

Buildings without a direct link reach each other over the lowest-latency multi-hop path; such a
path has the bottleneck bandwidth, the summed latency and the combined loss of its links.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import networkx as nx
from pydantic import Field

from . import bounds as B
from .base import StrictModel
from .gpu import GpuSpec


class Building(StrictModel):
    """One building (or region): a homogeneous pool of GPUs on a non-blocking-ish fabric."""

    name: str = Field(min_length=1, description="Unique building name.")
    gpu: GpuSpec | str = Field(description="GPU catalog name (see `catalog.gpus`) or an inline GPU spec.")
    num_gpus: int = Field(ge=1, le=B.MAX_GPUS, description="GPUs available for the job in this building (≤ 2^24).")
    gpus_per_node: int = Field(default=8, ge=1, le=B.MAX_GPUS_PER_NODE, description="GPUs per server node (≤ 1024).")
    fabric_oversubscription: float = Field(
        default=1.0, ge=1.0, le=B.MAX_FABRIC_OVERSUBSCRIPTION,
        description="Oversubscription of the building's scale-out fabric (1 = 1:1 Clos; ≤ 1024).",
    )
    fabric_latency_us: float | None = Field(
        default=None, ge=B.MIN_LATENCY_US, le=B.MAX_LATENCY_US,
        description="One-way latency across the building fabric, µs (≤ 1e8 = 100 s); default from the catalog.",
    )

    @property
    def gpu_spec(self) -> GpuSpec:
        """The resolved GPU spec (the loader replaces catalog names by specs)."""
        if isinstance(self.gpu, str):
            from ..catalog.gpus import gpu_by_name

            return gpu_by_name(self.gpu)
        return self.gpu


class Link(StrictModel):
    """A bidirectional link bundle between two buildings; bandwidth is per direction, in aggregate."""

    a: str = Field(min_length=1, description="Name of one end's building.")
    b: str = Field(min_length=1, description="Name of the other end's building.")
    bandwidth_gbps: float = Field(
        ge=B.MIN_BANDWIDTH_GBPS, le=B.MAX_BANDWIDTH_GBPS,
        description="Aggregate bandwidth per direction, Gb/s (1e-3 … 1e9 = 1 Mb/s … 1 Eb/s)."
    )
    latency_us: float = Field(
        ge=B.MIN_LATENCY_US, le=B.MAX_LATENCY_US,
        description="One-way propagation + switching latency, µs (1e-3 … 1e8 = 1 ns … 100 s)."
    )
    loss_rate: float = Field(default=0.0, ge=0.0, lt=1.0, description="Packet loss probability in [0, 1).")


@dataclass(frozen=True)
class Route:
    """The path between two buildings as one virtual link."""

    buildings: tuple[str, ...]
    bandwidth_gbps: float
    latency_us: float
    loss_rate: float


class Cluster(StrictModel):
    """All buildings available to the job and the links between them."""

    buildings: list[Building] = Field(min_length=1, description="Buildings, in pipeline order preference.")
    links: list[Link] = Field(default_factory=list, description="Links between buildings.")

    @cached_property
    def graph(self) -> nx.Graph:
        """Buildings as nodes, links as edges (attributes: bandwidth_gbps, latency_us, loss_rate)."""
        graph = nx.Graph()
        graph.add_nodes_from(b.name for b in self.buildings)
        for link in self.links:
            graph.add_edge(
                link.a, link.b, bandwidth_gbps=link.bandwidth_gbps, latency_us=link.latency_us,
                loss_rate=link.loss_rate,
            )
        return graph

    def building(self, name: str) -> Building:
        """The building called ``name`` (KeyError if none)."""
        for candidate in self.buildings:
            if candidate.name == name:
                return candidate
        raise KeyError(name)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Cluster:
        """A copy without the cached graph and routes, which follow the links ``update`` may change."""
        copy = super().model_copy(update=update, deep=deep)
        for cached in ("graph", "_routes"):
            copy.__dict__.pop(cached, None)
        return copy

    @cached_property
    def _routes(self) -> dict[tuple[str, str], Route]:
        """Routes computed so far (the cluster is frozen; a planner asks for the same pairs thousands of times)."""
        return {}

    def route(self, a: str, b: str) -> Route:
        """Lowest-latency path from ``a`` to ``b``: bottleneck bandwidth, summed latency, combined loss."""
        if (a, b) not in self._routes:
            self._routes[a, b] = self._shortest_route(a, b)
        return self._routes[a, b]

    def _shortest_route(self, a: str, b: str) -> Route:
        """``route`` computed on the link graph (uncached)."""
        if a == b:
            return Route((a,), float("inf"), 0.0, 0.0)
        path = nx.shortest_path(self.graph, a, b, weight="latency_us")
        edges = [self.graph.edges[u, v] for u, v in itertools.pairwise(path)]
        delivered = 1.0
        for edge in edges:
            delivered *= 1.0 - edge["loss_rate"]
        return Route(
            buildings=tuple(path),
            bandwidth_gbps=min(e["bandwidth_gbps"] for e in edges),
            latency_us=sum(e["latency_us"] for e in edges),
            loss_rate=1.0 - delivered,
        )

    @property
    def total_gpus(self) -> int:
        """GPUs over all buildings."""
        return sum(b.num_gpus for b in self.buildings)
