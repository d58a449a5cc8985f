"""GM-100: the adapter and its parsers."""
