"""Simulators: one device in virtual time (discrete events) and a fleet of devices."""

from dartfl.sim.device import SimConfig, simulate

__all__ = ["SimConfig", "simulate"]
