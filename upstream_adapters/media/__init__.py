"""Readers of media containers shared by the adapters: video decoding, the MP4 index."""
