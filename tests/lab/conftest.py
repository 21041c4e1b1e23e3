"""Fixtures for the simulator tests: a fresh simulator per test, the ISO server, real k8s clients."""

from __future__ import annotations

import pytest

from lab.isoserver import IsoServer
from lab.kubesim import CdiTimings, Simulator
from lab.ports import free_port
from tests.lab.kube import FAST, Cluster


@pytest.fixture(scope="session")
def iso():
    server = IsoServer(port=free_port(), size_mib=1).start()
    yield server
    server.stop()


@pytest.fixture
def sim(iso):
    simulator = Simulator(
        port=free_port(),
        vms=4,
        iso_base=iso.url,
        timings=FAST,
        cdi_timings=CdiTimings(import_seconds=1.0, schedule=0.05, retry=0.3, progress=0.25),
    ).start()
    yield simulator
    simulator.stop()


@pytest.fixture
def k8s(sim) -> Cluster:
    cluster = Cluster(sim)
    yield cluster
    cluster.api_client.close()
