"""`processbench eval`: from an OpenAI-compatible model endpoint to a scored report (docs/evaluation.md).

items.py    the release's eval items of the chosen levels and tracks (multiple choice; T13 steps), with the prompt and
            image references a model is shown
images.py   an item's images from the reconstruct folder (hash-checked), or reconstructed on the fly
options.py  the request knobs and their defaults (the body cap, the failure streak)
client.py   the chat-completion request: its retries, backoff, Retry-After, timeout, bounded body, named outcome;
            the endpoint's model list
store.py    the response store (append + fsync per answer, keyed by item uid, request and identity) and the
            predictions files
run.py      the run: identity, probes, preflight, bounded concurrency, what stops a run, progress, summary, then
            `processbench score`'s report
"""
