"""Kafka framing on the gateway: parsing requests, the ApiVersions fallback, encoding responses of any version."""

from __future__ import annotations

import io
import struct

import pytest
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v1.request import MetadataRequest as MetadataRequestV1
from kio.schema.metadata.v1.request import MetadataRequestTopic as MetadataRequestTopicV1
from kio.schema.metadata.v1.response import MetadataResponse as MetadataResponseV1
from kio.schema.metadata.v12.response import MetadataResponse as MetadataResponseV12
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.serial import entity_reader, entity_writer

from oncelog.kafka_gateway.protocol import (
    SUPPORTED,
    MalformedRequest,
    UnsupportedApiVersions,
    UnsupportedVersion,
    api_versions_error,
    encode_response,
    parse_request,
)


def _frame(api_key: int, version: int, body: object, correlation_id: int = 9) -> bytes:
    out = io.BytesIO()
    entity_writer(RequestHeaderV1)(
        out, RequestHeaderV1(request_api_key=api_key, request_api_version=version, correlation_id=correlation_id,
                             client_id="test")
    )  # fmt: skip
    entity_writer(type(body))(out, body)
    return out.getvalue()


def test_a_request_decodes_to_its_header_fields_and_kio_body() -> None:
    body = MetadataRequestV1(topics=(MetadataRequestTopicV1(name="orders"),))
    request = parse_request(_frame(3, 1, body))
    assert not isinstance(request, UnsupportedApiVersions)
    assert (request.api_key, request.version, request.correlation_id, request.client_id) == (3, 1, 9, "test")
    assert request.body == body


def test_an_api_versions_request_of_an_unknown_version_is_answered_in_v0_with_the_served_table() -> None:
    frame = struct.pack(">hhi", 18, 99, 42) + b"\x00\x00"
    request = parse_request(frame)
    assert request == UnsupportedApiVersions(42, 99)
    answer = api_versions_error(42)
    (size, correlation_id) = struct.unpack_from(">ii", answer)
    assert size == len(answer) - 4 and correlation_id == 42
    response, _ = entity_reader(ApiVersionsResponseV0)(answer, 8)
    assert response.error_code == ErrorCode.unsupported_version
    assert {k.api_key: (k.min_version, k.max_version) for k in response.api_keys} == SUPPORTED


@pytest.mark.parametrize(("api_key", "version"), [(0, 2), (1, 3), (32, 0), (999, 0)])
def test_an_api_or_version_outside_the_served_table_is_refused(api_key: int, version: int) -> None:
    with pytest.raises(UnsupportedVersion):
        parse_request(struct.pack(">hhi", api_key, version, 1) + b"\x00\x00")


@pytest.mark.parametrize("frame", [b"\x00\x03", _frame(3, 1, MetadataRequestV1(topics=None))[:-3]])
def test_a_truncated_request_is_malformed(frame: bytes) -> None:
    with pytest.raises(MalformedRequest):
        parse_request(frame)


def test_one_answer_serves_every_version_dropping_what_a_version_lacks() -> None:
    answer = {
        "throttle_time": 0,
        "brokers": [{"node_id": 0, "host": "gw", "port": 9092, "rack": None}],
        "cluster_id": "c1",
        "controller_id": 0,
        "topics": [
            {"error_code": 3, "name": "missing", "topic_id": "00000000-0000-0000-0000-000000000000", "partitions": []}
        ],
    }
    v1 = encode_response(3, 1, 5, answer)
    v12 = encode_response(3, 12, 5, answer)
    decoded_v1, _ = entity_reader(MetadataResponseV1)(v1, 8)  # v1: response header v0
    decoded_v12, _ = entity_reader(MetadataResponseV12)(v12, 9)  # v12 is flexible: header v1 has a tag byte
    assert decoded_v1.topics[0].error_code == ErrorCode.unknown_topic_or_partition
    assert decoded_v12.cluster_id == "c1" and decoded_v12.brokers[0].port == 9092
    assert not hasattr(decoded_v1, "cluster_id")
