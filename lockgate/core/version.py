"""The version of lockgate (``lockgate.__version__``), where every layer may read it."""

__version__ = "0.1.0"
