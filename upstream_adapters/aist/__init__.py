"""AIST-Bimanual: the adapter and its parsers."""
