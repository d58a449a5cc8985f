"""The frames stage: exact frame extraction into a content-addressed cache, rendering of the images shown to the
model, the visual gate, and reconstruction of every item's images from upstream data (no Dagster in here)."""
