"""A small client of the controller's REST API (used by the CLI and the demo)."""

from __future__ import annotations

from typing import Any

import httpx


class ApiError(Exception):
    """The API refused a call or could not be reached; `status` is 0 when unreachable."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"({status}) {message}" if status else message)
        self.status = status
        self.message = message


class ControllerClient:
    """Calls one controller's API; any controller answers reads and accepts writes."""

    def __init__(
        self, base_url: str, *, token: str | None = None, timeout_s: float = 30.0, verify: str | bool = True
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout_s, verify=verify)

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """One request; the decoded JSON body (None when empty), or `ApiError`."""
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ApiError(0, f"cannot reach the controller API: {exc}") from exc
        if response.status_code >= 400:
            try:
                message = str(response.json().get("error", response.text))
            except ValueError:
                message = response.text
            raise ApiError(response.status_code, message)
        return response.json() if response.content else None

    def add_topic(self, topic: str, **settings: str | None) -> Any:
        body = {k: v for k, v in settings.items() if v is not None}
        return self.call("POST", f"/topics/{topic}", json=body or None)

    def close(self) -> None:
        self._http.close()
