"""The request knobs of an eval run and their defaults (the CLI's flags read their defaults from here; kept free of
heavy imports so that building the CLI's parser stays cheap)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ClientOptions:
    """The knobs of the requests (the CLI's flags; these are their defaults)."""

    base_url: str = "http://127.0.0.1:8000/v1"
    model: str = ""
    max_tokens: int = 1024
    temperature: float = 0.0
    seed: int | None = None
    timeout_s: float = 120.0
    retries: int = 5
    backoff_s: float = 1.0
    backoff_max_s: float = 60.0
    retry_after_max_s: float = 300.0
    concurrency: int = 8
    # The body of an answer is read up to body_cap(): max_tokens tokens of at most bytes_per_token bytes each (a
    # token is a few characters; 32 bytes holds the longest tokens of common vocabularies even JSON-escaped, e.g.
    # six \uXXXX escapes) plus body_overhead_bytes for the JSON around the text (ids, usage, a reasoning field).
    bytes_per_token: int = 32
    body_overhead_bytes: int = 65536
    error_body_bytes: int = 65536  # an error body: only its message is kept
    models_body_bytes: int = 8 << 20  # GET /models of a gateway lists hundreds of models
    # This many failures in a row (no answer between them) and the runner asks the probes again (a plain request, one
    # small image): if the server no longer takes them, the run stops there instead of spending every item's retries.
    fail_streak: int = 8

    def request_params(self) -> dict:
        """What of these options the model's answer depends on (part of the response store's key)."""
        return {"max_tokens": self.max_tokens, "temperature": self.temperature, "seed": self.seed}

    def body_cap(self) -> int:
        """The most bytes of one answer's body read (and so stored) at --max-tokens."""
        return int(self.max_tokens) * self.bytes_per_token + self.body_overhead_bytes
