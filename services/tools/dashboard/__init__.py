"""The web dashboard of `poolwise up --http-port P` (docs/dashboard.md): a page at `/` and a
read-only JSON API under `/api/`, served from a cache of what the services already answer and of
the log's tail (`source.Source`), refreshed at most once per `--dashboard-refresh` seconds while
someone looks. It runs in `up`'s own process (with `--single-process`, in the one process), never
in a service's fold: a slow or stuck browser holds its own connection and nothing else."""

from __future__ import annotations

from collections.abc import Callable

from services.tools.dashboard.api import dashboard
from services.tools.dashboard.source import Source


class Dashboard:
    """What `process_http.run_gathering` / `run_observed` serve beside their routes (`Extra`)."""

    def __init__(self, url: Callable[[], str | None], every: float = 1.0) -> None:
        self.source = Source(url, every)
        self.handler = dashboard(self.source)

    async def run(self) -> None:
        await self.source.run()
