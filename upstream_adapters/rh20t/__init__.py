"""RH20T: the adapter and its parsers."""
