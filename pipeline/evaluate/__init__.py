"""`processbench eval`: from an OpenAI-compatible model endpoint to a scored report (docs/evaluation.md).

items.py    the release's eval items of the chosen levels, with the exports' prompt and image references
images.py   an item's images from the reconstruct folder (hash-checked), or reconstructed on the fly
options.py  the request knobs and their defaults
client.py   the chat-completion request, its retries, backoff, Retry-After and timeout
store.py    the response store (append + fsync per answer) and predictions.jsonl
run.py      the run: preflight, bounded concurrency, progress, summary, then `processbench score`'s report
"""
