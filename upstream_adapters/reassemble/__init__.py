"""REASSEMBLE: the adapter and its parsers."""
