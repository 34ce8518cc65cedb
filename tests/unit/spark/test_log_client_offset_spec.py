"""LogClient.list_offsets takes the names "earliest" and "latest" only."""

from __future__ import annotations

import pytest

from oncelog.api.storage.v1 import OFFSET_SPEC_LATEST
from oncelog.spark.channels import LogClient
from oncelog.vocabulary import IsolationLevel, TopicPartition


@pytest.mark.parametrize("spec", [OFFSET_SPEC_LATEST, 2, "LATEST", "end"])
def test_an_offset_spec_that_is_not_a_name_is_refused_before_any_call(spec: object) -> None:
    # no server listens at this address: a refusal must come before any request is made
    client = LogClient(["127.0.0.1:1"], request_timeout_s=0.5)
    with pytest.raises(ValueError, match="takes 'earliest' or 'latest'"):
        client.list_offsets([TopicPartition("t", 0)], spec, IsolationLevel.READ_COMMITTED)  # type: ignore[arg-type]
