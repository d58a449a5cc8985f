"""The T13 step track's scoring side: the answer parser (parse.py), the release's step files (tables.py), the step
scorer (score.py: macro-F1, first-error score, baselines, intervals) and the blind gates of the validity audit
(gates.py). Plain functions over tables; `processbench score` and the validity audit only call them. A release
without step files has no step track: every entry point then behaves as without this package."""
