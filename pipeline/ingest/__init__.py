"""Ingest: every source's adapter run unit by unit into the IR tables (run), and the guard that names the unit a killed reader held (guard)."""
