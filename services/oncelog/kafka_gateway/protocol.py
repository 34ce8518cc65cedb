"""Kafka's binary protocol on the gateway: which API versions are served, request parsing, response encoding.

The message types come from ``kio`` (frozen dataclasses generated from Kafka's own JSON message schemas, with
their readers and writers); this module only frames them. A request frame is ``int32 size`` then the request
header (v1, or v2 for flexible versions) and the body; a response is ``int32 size``, the response header (v0, or
v1 for flexible versions, except ApiVersions which always answers with v0 so that any client can read it) and the
body. Handlers answer with plain dicts; :func:`build` turns them into the response dataclass of the request's
version, dropping what that version lacks, so one handler serves every version of its API.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import types
import typing
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import UnknownAPIKey, UnknownEntity
from kio.index import load_request_schema as _load_request_schema
from kio.index import load_response_schema as _load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import TZAware, i32Timedelta, i64Timedelta

API_VERSIONS = 18
"""The API key of ApiVersions, the one request any version of which gets an answer."""

SUPPORTED: dict[int, tuple[int, int]] = {
    0: (3, 11),  # Produce: RecordBatch v2 only (v3+); v12 is KIP-890's implicit AddPartitionsToTxn
    1: (4, 12),  # Fetch: isolation level and aborted transactions (v4+); v13+ name topics by id
    2: (1, 7),  # ListOffsets: v2+ carry the isolation level; v8+ add new timestamp kinds
    3: (1, 12),  # Metadata
    8: (2, 8),  # OffsetCommit
    9: (1, 8),  # OffsetFetch: v7 require_stable, v8 several groups in one request
    10: (0, 4),  # FindCoordinator: v4 batches keys
    11: (0, 7),  # JoinGroup (classic protocol, mapped onto the KIP-848 coordinator)
    12: (0, 4),  # Heartbeat
    13: (0, 4),  # LeaveGroup: v3 batches members
    14: (0, 5),  # SyncGroup
    15: (0, 5),  # DescribeGroups
    16: (0, 4),  # ListGroups: v4 filters by state
    18: (0, 4),  # ApiVersions
    19: (2, 7),  # CreateTopics
    20: (1, 5),  # DeleteTopics: v6 names topics by id
    22: (0, 4),  # InitProducerId: v5 is KIP-890 (transaction version 2)
    23: (2, 4),  # OffsetForLeaderEpoch (KIP-320): v0-v1 were removed in Kafka 4.0
    24: (0, 3),  # AddPartitionsToTxn: v4 batches transactions (broker to broker), v5 is KIP-890
    25: (0, 3),  # AddOffsetsToTxn
    27: (1, 2),  # WriteTxnMarkers: ABORT markers of kafka-transactions.sh abort (v0 was removed in Kafka 4.0)
    26: (0, 3),  # EndTxn
    28: (0, 3),  # TxnOffsetCommit
    32: (1, 4),  # DescribeConfigs: topics only
    37: (0, 3),  # CreatePartitions: counts only (oncelog places the new partitions)
    44: (0, 1),  # IncrementalAlterConfigs: topic SET and DELETE
    61: (0, 0),  # DescribeProducers (KIP-664)
    65: (0, 0),  # DescribeTransactions
    66: (0, 0),  # ListTransactions: v1 filters by duration
    75: (0, 0),  # DescribeTopicPartitions (KIP-966): what kafka-topics --describe asks before Metadata
}
"""API key -> (lowest, highest) version the gateway serves; ApiVersions advertises exactly this table."""

API_NAMES = {
    0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit", 9: "OffsetFetch",
    10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat", 13: "LeaveGroup", 14: "SyncGroup", 15: "DescribeGroups",
    16: "ListGroups",
    18: "ApiVersions", 19: "CreateTopics", 20: "DeleteTopics", 22: "InitProducerId", 23: "OffsetForLeaderEpoch",
    24: "AddPartitionsToTxn", 25: "AddOffsetsToTxn", 26: "EndTxn", 27: "WriteTxnMarkers", 28: "TxnOffsetCommit",
    32: "DescribeConfigs", 37: "CreatePartitions", 44: "IncrementalAlterConfigs",
    61: "DescribeProducers",
    65: "DescribeTransactions", 66: "ListTransactions", 75: "DescribeTopicPartitions",
}  # fmt: skip

# kio resolves a schema through importlib (pkgutil.resolve_name) on every call: 3 % of the gateway's samples in a
# one-record-transaction profile. The schemas never change, so each is looked up once.
load_request_schema = cache(_load_request_schema)
load_response_schema = cache(_load_response_schema)

_PREFIX = struct.Struct(">hhi")  # api key, api version, correlation id: the same in every request header version


class MalformedRequest(ValueError):
    """A frame that is not a request the gateway can read: the connection is closed (Kafka does the same)."""


class UnsupportedVersion(MalformedRequest):
    """An API or version outside :data:`SUPPORTED` (and not ApiVersions, which is answered with an error)."""


@dataclass(frozen=True, slots=True)
class Request:
    """One decoded request: its header fields and its kio body."""

    api_key: int
    version: int
    correlation_id: int
    client_id: str | None
    body: Any
    frame: bytes = dataclasses.field(default=b"", repr=False, compare=False)
    """The request as received (header and body, without the size prefix): what a relay passes on unchanged."""

    @property
    def name(self) -> str:
        """The API's name (``Produce``, ``Fetch``, ...)."""
        return API_NAMES.get(self.api_key, f"api {self.api_key}")


@dataclass(frozen=True, slots=True)
class UnsupportedApiVersions:
    """An ApiVersions request of a version the gateway cannot read: answered in v0 with UNSUPPORTED_VERSION."""

    correlation_id: int
    version: int


def parse_request(frame: bytes) -> Request | UnsupportedApiVersions:
    """Decode one request frame (without its size prefix).

    Raises:
        UnsupportedVersion: an API or version the gateway does not serve.
        MalformedRequest: the bytes do not decode as the request they announce.
    """
    if len(frame) < _PREFIX.size:
        raise MalformedRequest(f"a request frame of {len(frame)} bytes is shorter than a request header")
    api_key, version, correlation_id = _PREFIX.unpack_from(frame)
    low_high = SUPPORTED.get(api_key)
    if low_high is None or not low_high[0] <= version <= low_high[1]:
        if api_key == API_VERSIONS:
            return UnsupportedApiVersions(correlation_id, version)
        served = f"{low_high[0]}..{low_high[1]}" if low_high else "none"
        raise UnsupportedVersion(f"{API_NAMES.get(api_key, f'api key {api_key}')} v{version} (served: {served})")
    try:
        schema = load_request_schema(api_key, version)
        header, header_size = entity_reader(schema.__header_schema__)(frame, 0)
        body, body_size = entity_reader(schema)(frame, header_size)
    except (UnknownAPIKey, UnknownEntity) as exc:
        raise UnsupportedVersion(str(exc)) from exc
    except Exception as exc:  # kio's native readers raise several types on short or corrupt input
        raise MalformedRequest(f"{API_NAMES[api_key]} v{version} does not decode: {exc}") from exc
    # Bytes after the body are ignored, as Kafka's broker ignores them: librdkafka's Metadata v9+ asking for every
    # topic leaves three bytes of a reserved array-count slot behind the request's fields.
    del body_size
    return Request(api_key, version, correlation_id, header.client_id, body, frame)


def encode_response(api_key: int, version: int, correlation_id: int, body: Mapping[str, Any]) -> bytes:
    """The framed response (size prefix, header, body) to a request of ``api_key`` at ``version``."""
    schema = load_response_schema(api_key, version)
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    out.write(struct.pack(">i", correlation_id))
    if schema.__flexible__ and api_key != API_VERSIONS:
        out.write(b"\0")  # response header v1: no tagged fields
    entity_writer(schema)(out, build(schema, body))
    data = out.getbuffer()
    struct.pack_into(">i", data, 0, len(data) - 4)
    return bytes(data)


def api_versions_error(correlation_id: int) -> bytes:
    """ApiVersions v0 with UNSUPPORTED_VERSION and the served table, so the client retries with a version we read."""
    return encode_response(
        API_VERSIONS, 0, correlation_id, {"error_code": ErrorCode.unsupported_version, "api_keys": api_version_list()}
    )


def api_version_list() -> list[dict[str, int]]:
    """The ``api_keys`` of an ApiVersions answer."""
    return [{"api_key": k, "min_version": low, "max_version": high} for k, (low, high) in sorted(SUPPORTED.items())]


# ------------------------------------------------------------------------------------------- dict -> dataclass


@cache
def _hints(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _strip_optional(hint: Any) -> Any:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1:
        return args[0]
    return hint


def _convert(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    hint = _strip_optional(hint)
    if typing.get_origin(hint) is tuple:
        item = typing.get_args(hint)[0]
        return tuple(_convert(item, v) for v in value)
    if dataclasses.is_dataclass(hint):
        return value if isinstance(value, hint) else build(hint, value)  # type: ignore[arg-type]
    if hint is ErrorCode:
        return ErrorCode(int(value))
    if hint in (i32Timedelta, i64Timedelta):
        return value if isinstance(value, datetime.timedelta) else datetime.timedelta(milliseconds=value)
    if hint is TZAware:  # milliseconds since the epoch; -1 (none) reads as the epoch itself
        return (
            value
            if isinstance(value, datetime.datetime)
            else datetime.datetime.fromtimestamp(max(value, 0) / 1000, tz=datetime.UTC)
        )
    if hint is uuid.UUID:
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    return value


def build(cls: type[Any], data: Mapping[str, Any]) -> Any:
    """The kio dataclass ``cls`` from ``data``: keys ``cls`` lacks are dropped, missing ones take their defaults.

    Nested entities are dicts (or lists of dicts); error codes may be ints; durations milliseconds.

    Raises:
        TypeError: a field without a default is missing from ``data`` (a handler bug).
    """
    hints = _hints(cls)  # type: ignore[arg-type]
    kwargs = {f.name: _convert(hints[f.name], data[f.name]) for f in dataclasses.fields(cls) if f.name in data}
    return cls(**kwargs)
