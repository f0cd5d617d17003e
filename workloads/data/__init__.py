"""Data files shipped with the package (a package so importlib.resources can address it)."""
