"""The `dartfl` command: the one composition root that may import every top-level package.

Subcommand modules import heavy dependencies inside their handlers so `dartfl --help` stays fast.
"""
