"""A KubeVirt + CDI API simulator for the lab, with a record of what each VM booted from."""

from lab.kubesim.cdi import CdiTimings
from lab.kubesim.controller import Timings
from lab.kubesim.simulator import Simulator

__all__ = ["CdiTimings", "Simulator", "Timings"]
