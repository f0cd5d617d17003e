"""DART-FL core: allocator, policies, simulators, metrics and run store (stdlib + numpy only)."""

__version__ = "0.1.0"
