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

    def request_params(self) -> dict:
        """What of these options the model's answer depends on (part of the response store's key)."""
        return {"max_tokens": self.max_tokens, "temperature": self.temperature, "seed": self.seed}
