"""The package's version, in a module of its own: what records it (the history's environment, the HTML
report) imports it from here, not from the package, whose __init__ imports the API (a circle otherwise)."""

__version__ = "0.1.0"
