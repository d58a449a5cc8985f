"""Writing and checking the release: schema, rows, files, writers, prompts, provenance, validation, the path scan and publishing."""
