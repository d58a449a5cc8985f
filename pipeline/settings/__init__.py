"""The configuration: loading and merging configs/ (config), the one typed Settings object (root) and the models of its sections (models, labels, steps, step_gates, types) and their errors."""
