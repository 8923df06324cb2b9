"""The snapshot bucket is made even while the server still removes one deleted a moment before
(it answers 500, "error creating store for stream", for a while): seen in CI, where a test deletes
the bucket and the next save makes it again at once."""

from __future__ import annotations

from typing import Any

import pytest
from nats.js.errors import BucketNotFoundError, ServerError

from services.common.snapshots import CREATE_ATTEMPTS, ObjectStoreSnapshots


class Busy:
    """A JetStream context with no bucket, whose first `fails` creations are refused."""

    def __init__(self, fails: int) -> None:
        self.fails, self.tries = fails, 0

    async def object_store(self, bucket: str) -> Any:
        raise BucketNotFoundError

    async def create_object_store(self, bucket: str, config: Any) -> Any:
        self.tries += 1
        if self.tries <= self.fails:
            raise ServerError(code=500, err_code=10049, description="error creating store for stream")
        return ("store", bucket, config.replicas)


@pytest.mark.anyio
async def test_a_bucket_still_going_is_made_once_it_is_gone() -> None:
    js = Busy(fails=2)
    assert await ObjectStoreSnapshots(js, "POOLWISE").opened() == ("store", "poolwise_snapshots", 1)
    assert js.tries == 3


@pytest.mark.anyio
async def test_a_server_that_keeps_refusing_is_the_answer() -> None:
    js = Busy(fails=CREATE_ATTEMPTS)
    with pytest.raises(ServerError, match="error creating store"):
        await ObjectStoreSnapshots(js, "POOLWISE").opened()
    assert js.tries == CREATE_ATTEMPTS
