"""Domain errors shared by every oncelog component, free of gRPC and protobuf.

Each error carries a :class:`Reason` whose name matches a value of the wire enum
``oncelog.api.common.v1.ErrorReason`` (``ERROR_REASON_<NAME>``). The reason decides the
gRPC status code and the two flags every oncelog error reports (design/architecture.md §3, §1.7):

* ``retriable`` — the same request may succeed if sent again (after metadata refresh for
  leader/coordinator moves);
* ``definite`` — the outcome is known: either nothing happened, or it happened. An
  indeterminate error (``definite=False``) must be retried with the same identity, never
  "repaired" by resetting sequences or turning a commit into an abort.

The table :data:`REASONS` is the single place that fixes these properties; the rpc layer maps
them to wire status codes and the client library maps them back to Kafka-style exception
classes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Reason(enum.Enum):
    """Why a request failed; names follow Kafka's error codes where Kafka has one."""

    UNKNOWN_SERVER_ERROR = "UNKNOWN_SERVER_ERROR"
    INVALID_REQUEST = "INVALID_REQUEST"
    CORRUPT_MESSAGE = "CORRUPT_MESSAGE"
    INVALID_RECORD = "INVALID_RECORD"
    MESSAGE_TOO_LARGE = "MESSAGE_TOO_LARGE"
    UNKNOWN_TOPIC_OR_PARTITION = "UNKNOWN_TOPIC_OR_PARTITION"
    TOPIC_ALREADY_EXISTS = "TOPIC_ALREADY_EXISTS"
    INVALID_TOPIC = "INVALID_TOPIC"
    INVALID_PARTITIONS = "INVALID_PARTITIONS"
    INVALID_CONFIG = "INVALID_CONFIG"
    NOT_LEADER = "NOT_LEADER"
    FENCED_LEADER_EPOCH = "FENCED_LEADER_EPOCH"
    UNKNOWN_LEADER_EPOCH = "UNKNOWN_LEADER_EPOCH"
    OFFSET_OUT_OF_RANGE = "OFFSET_OUT_OF_RANGE"
    NOT_COORDINATOR = "NOT_COORDINATOR"
    COORDINATOR_NOT_AVAILABLE = "COORDINATOR_NOT_AVAILABLE"
    COORDINATOR_LOAD_IN_PROGRESS = "COORDINATOR_LOAD_IN_PROGRESS"
    PRODUCER_FENCED = "PRODUCER_FENCED"
    INVALID_PRODUCER_EPOCH = "INVALID_PRODUCER_EPOCH"
    INVALID_PRODUCER_ID_MAPPING = "INVALID_PRODUCER_ID_MAPPING"
    UNKNOWN_PRODUCER_ID = "UNKNOWN_PRODUCER_ID"
    OUT_OF_ORDER_SEQUENCE = "OUT_OF_ORDER_SEQUENCE"
    DUPLICATE_SEQUENCE = "DUPLICATE_SEQUENCE"
    INVALID_TXN_STATE = "INVALID_TXN_STATE"
    INVALID_TRANSACTION_TIMEOUT = "INVALID_TRANSACTION_TIMEOUT"
    CONCURRENT_TRANSACTIONS = "CONCURRENT_TRANSACTIONS"
    TRANSACTION_COORDINATOR_FENCED = "TRANSACTION_COORDINATOR_FENCED"
    TRANSACTIONAL_ID_NOT_FOUND = "TRANSACTIONAL_ID_NOT_FOUND"
    TRANSACTION_ABORTABLE = "TRANSACTION_ABORTABLE"
    UNSTABLE_OFFSET_COMMIT = "UNSTABLE_OFFSET_COMMIT"
    ILLEGAL_GENERATION = "ILLEGAL_GENERATION"
    UNKNOWN_MEMBER_ID = "UNKNOWN_MEMBER_ID"
    STALE_REQUESTER_EPOCH = "STALE_REQUESTER_EPOCH"
    PRODUCER_ID_SPACE_EXHAUSTED = "PRODUCER_ID_SPACE_EXHAUSTED"
    REQUEST_TIMED_OUT = "REQUEST_TIMED_OUT"
    STORAGE_UNAVAILABLE = "STORAGE_UNAVAILABLE"
    NETWORK_EXCEPTION = "NETWORK_EXCEPTION"
    INVALID_REPLICATION_FACTOR = "INVALID_REPLICATION_FACTOR"
    NOT_ENOUGH_REPLICAS = "NOT_ENOUGH_REPLICAS"
    STALE_MEMBER_EPOCH = "STALE_MEMBER_EPOCH"
    FENCED_MEMBER_EPOCH = "FENCED_MEMBER_EPOCH"
    UNRELEASED_INSTANCE_ID = "UNRELEASED_INSTANCE_ID"
    UNSUPPORTED_ASSIGNOR = "UNSUPPORTED_ASSIGNOR"
    INVALID_REGULAR_EXPRESSION = "INVALID_REGULAR_EXPRESSION"
    GROUP_ID_NOT_FOUND = "GROUP_ID_NOT_FOUND"
    NON_EMPTY_GROUP = "NON_EMPTY_GROUP"


@dataclass(frozen=True)
class ReasonInfo:
    """Fixed properties of a reason: its gRPC status name and default flags."""

    status: str
    retriable: bool
    definite: bool


# status names are grpc.StatusCode member names; kept as strings so this module has no grpc import.
REASONS: dict[Reason, ReasonInfo] = {
    Reason.UNKNOWN_SERVER_ERROR: ReasonInfo("INTERNAL", retriable=False, definite=False),
    Reason.INVALID_REQUEST: ReasonInfo("INVALID_ARGUMENT", retriable=False, definite=True),
    Reason.CORRUPT_MESSAGE: ReasonInfo("INVALID_ARGUMENT", retriable=True, definite=True),
    Reason.INVALID_RECORD: ReasonInfo("INVALID_ARGUMENT", retriable=False, definite=True),
    Reason.MESSAGE_TOO_LARGE: ReasonInfo("INVALID_ARGUMENT", retriable=False, definite=True),
    Reason.UNKNOWN_TOPIC_OR_PARTITION: ReasonInfo("NOT_FOUND", retriable=True, definite=True),
    Reason.TOPIC_ALREADY_EXISTS: ReasonInfo("ALREADY_EXISTS", retriable=False, definite=True),
    Reason.INVALID_TOPIC: ReasonInfo("INVALID_ARGUMENT", retriable=False, definite=True),
    Reason.INVALID_PARTITIONS: ReasonInfo("INVALID_ARGUMENT", retriable=False, definite=True),
    Reason.INVALID_CONFIG: ReasonInfo("INVALID_ARGUMENT", retriable=False, definite=True),
    Reason.NOT_LEADER: ReasonInfo("FAILED_PRECONDITION", retriable=True, definite=True),
    Reason.FENCED_LEADER_EPOCH: ReasonInfo("FAILED_PRECONDITION", retriable=True, definite=True),
    Reason.UNKNOWN_LEADER_EPOCH: ReasonInfo("UNAVAILABLE", retriable=True, definite=True),
    Reason.OFFSET_OUT_OF_RANGE: ReasonInfo("OUT_OF_RANGE", retriable=False, definite=True),
    Reason.NOT_COORDINATOR: ReasonInfo("FAILED_PRECONDITION", retriable=True, definite=True),
    Reason.COORDINATOR_NOT_AVAILABLE: ReasonInfo("UNAVAILABLE", retriable=True, definite=True),
    Reason.COORDINATOR_LOAD_IN_PROGRESS: ReasonInfo("UNAVAILABLE", retriable=True, definite=True),
    Reason.PRODUCER_FENCED: ReasonInfo("FAILED_PRECONDITION", retriable=False, definite=True),
    Reason.INVALID_PRODUCER_EPOCH: ReasonInfo("FAILED_PRECONDITION", retriable=False, definite=True),
    Reason.INVALID_PRODUCER_ID_MAPPING: ReasonInfo("FAILED_PRECONDITION", retriable=False, definite=True),
    Reason.UNKNOWN_PRODUCER_ID: ReasonInfo("FAILED_PRECONDITION", retriable=True, definite=True),
    Reason.OUT_OF_ORDER_SEQUENCE: ReasonInfo("FAILED_PRECONDITION", retriable=False, definite=True),
    Reason.DUPLICATE_SEQUENCE: ReasonInfo("ALREADY_EXISTS", retriable=False, definite=True),
    Reason.INVALID_TXN_STATE: ReasonInfo("FAILED_PRECONDITION", retriable=False, definite=True),
    Reason.INVALID_TRANSACTION_TIMEOUT: ReasonInfo("INVALID_ARGUMENT", retriable=False, definite=True),
    Reason.CONCURRENT_TRANSACTIONS: ReasonInfo("ABORTED", retriable=True, definite=True),
    Reason.TRANSACTION_COORDINATOR_FENCED: ReasonInfo("FAILED_PRECONDITION", retriable=False, definite=True),
    Reason.TRANSACTIONAL_ID_NOT_FOUND: ReasonInfo("NOT_FOUND", retriable=False, definite=True),
    Reason.TRANSACTION_ABORTABLE: ReasonInfo("ABORTED", retriable=False, definite=True),
    Reason.UNSTABLE_OFFSET_COMMIT: ReasonInfo("UNAVAILABLE", retriable=True, definite=True),
    Reason.ILLEGAL_GENERATION: ReasonInfo("FAILED_PRECONDITION", retriable=False, definite=True),
    Reason.UNKNOWN_MEMBER_ID: ReasonInfo("FAILED_PRECONDITION", retriable=False, definite=True),
    Reason.STALE_REQUESTER_EPOCH: ReasonInfo("FAILED_PRECONDITION", retriable=False, definite=True),
    Reason.PRODUCER_ID_SPACE_EXHAUSTED: ReasonInfo("RESOURCE_EXHAUSTED", retriable=False, definite=True),
    Reason.REQUEST_TIMED_OUT: ReasonInfo("DEADLINE_EXCEEDED", retriable=True, definite=False),
    Reason.STORAGE_UNAVAILABLE: ReasonInfo("UNAVAILABLE", retriable=True, definite=False),
    Reason.NETWORK_EXCEPTION: ReasonInfo("UNAVAILABLE", retriable=True, definite=False),
    Reason.INVALID_REPLICATION_FACTOR: ReasonInfo("INVALID_ARGUMENT", retriable=False, definite=True),
    Reason.NOT_ENOUGH_REPLICAS: ReasonInfo("UNAVAILABLE", retriable=True, definite=True),
    Reason.STALE_MEMBER_EPOCH: ReasonInfo("FAILED_PRECONDITION", retriable=False, definite=True),
    Reason.FENCED_MEMBER_EPOCH: ReasonInfo("FAILED_PRECONDITION", retriable=False, definite=True),
    Reason.UNRELEASED_INSTANCE_ID: ReasonInfo("FAILED_PRECONDITION", retriable=False, definite=True),
    Reason.UNSUPPORTED_ASSIGNOR: ReasonInfo("INVALID_ARGUMENT", retriable=False, definite=True),
    Reason.INVALID_REGULAR_EXPRESSION: ReasonInfo("INVALID_ARGUMENT", retriable=False, definite=True),
    Reason.GROUP_ID_NOT_FOUND: ReasonInfo("NOT_FOUND", retriable=False, definite=True),
    Reason.NON_EMPTY_GROUP: ReasonInfo("FAILED_PRECONDITION", retriable=False, definite=True),
}


class OncelogError(Exception):
    """Base of every domain error; ``reason`` selects status and default flags.

    Args:
        message: what went wrong and what to do about it, for a human.
        definite: overrides the reason's default when the raiser knows better (for example a
            storage failure that happened before anything was written).
        metadata: small string facts for the client (e.g. ``leader`` address on NOT_LEADER).
    """

    reason: Reason = Reason.UNKNOWN_SERVER_ERROR

    def __init__(
        self,
        message: str,
        *,
        definite: bool | None = None,
        metadata: dict[str, str] | None = None,
        reason: Reason | None = None,
    ) -> None:
        super().__init__(message)
        if reason is not None:
            self.reason = reason
        self.message = message
        info = REASONS[self.reason]
        self.retriable = info.retriable
        self.definite = info.definite if definite is None else definite
        self.metadata = dict(metadata or {})

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.reason.name}: {self.message!r})"


def _error(name: str, reason: Reason, doc: str) -> type[OncelogError]:
    cls = type(name, (OncelogError,), {"reason": reason, "__doc__": doc})
    return cls


UnknownServerError = _error(
    "UnknownServerError", Reason.UNKNOWN_SERVER_ERROR, "An unexpected server failure; the outcome is unknown."
)
InvalidRequest = _error("InvalidRequest", Reason.INVALID_REQUEST, "A field is missing or malformed.")
CorruptMessage = _error("CorruptMessage", Reason.CORRUPT_MESSAGE, "A record batch failed its CRC or framing check.")
InvalidRecord = _error("InvalidRecord", Reason.INVALID_RECORD, "A record batch is well-formed but not acceptable.")
MessageTooLarge = _error("MessageTooLarge", Reason.MESSAGE_TOO_LARGE, "A batch exceeds max_message_bytes.")
UnknownTopicOrPartition = _error(
    "UnknownTopicOrPartition", Reason.UNKNOWN_TOPIC_OR_PARTITION, "The topic or partition does not exist."
)
TopicAlreadyExists = _error("TopicAlreadyExists", Reason.TOPIC_ALREADY_EXISTS, "A topic of that name exists.")
InvalidTopic = _error("InvalidTopic", Reason.INVALID_TOPIC, "The topic name breaks the naming rules.")
InvalidPartitions = _error("InvalidPartitions", Reason.INVALID_PARTITIONS, "The partition count is not acceptable.")
InvalidConfig = _error("InvalidConfig", Reason.INVALID_CONFIG, "A configuration value is not acceptable.")
NotLeader = _error("NotLeader", Reason.NOT_LEADER, "This node does not lead the partition.")
FencedLeaderEpoch = _error("FencedLeaderEpoch", Reason.FENCED_LEADER_EPOCH, "The leader epoch sent is stale.")
UnknownLeaderEpoch = _error("UnknownLeaderEpoch", Reason.UNKNOWN_LEADER_EPOCH, "The leader epoch sent is newer.")
OffsetOutOfRange = _error("OffsetOutOfRange", Reason.OFFSET_OUT_OF_RANGE, "The offset is outside the log.")
NotCoordinator = _error("NotCoordinator", Reason.NOT_COORDINATOR, "This process does not own the shard.")
CoordinatorNotAvailable = _error(
    "CoordinatorNotAvailable", Reason.COORDINATOR_NOT_AVAILABLE, "No coordinator owns the shard right now."
)
CoordinatorLoadInProgress = _error(
    "CoordinatorLoadInProgress", Reason.COORDINATOR_LOAD_IN_PROGRESS, "The shard is loading; retry shortly."
)
ProducerFenced = _error("ProducerFenced", Reason.PRODUCER_FENCED, "A newer producer instance owns the id.")
InvalidProducerEpoch = _error(
    "InvalidProducerEpoch", Reason.INVALID_PRODUCER_EPOCH, "The producer epoch is older than the one seen."
)
InvalidProducerIdMapping = _error(
    "InvalidProducerIdMapping", Reason.INVALID_PRODUCER_ID_MAPPING, "The producer id does not match the txn id."
)
UnknownProducerId = _error("UnknownProducerId", Reason.UNKNOWN_PRODUCER_ID, "No state exists for the producer id.")
OutOfOrderSequence = _error(
    "OutOfOrderSequence", Reason.OUT_OF_ORDER_SEQUENCE, "The batch sequence does not follow the last one."
)
DuplicateSequence = _error("DuplicateSequence", Reason.DUPLICATE_SEQUENCE, "The batch was already written.")
InvalidTxnState = _error("InvalidTxnState", Reason.INVALID_TXN_STATE, "The request does not fit the txn state.")
InvalidTransactionTimeout = _error(
    "InvalidTransactionTimeout", Reason.INVALID_TRANSACTION_TIMEOUT, "The transaction timeout is out of range."
)
ConcurrentTransactions = _error(
    "ConcurrentTransactions", Reason.CONCURRENT_TRANSACTIONS, "Another transition of this id is in progress."
)
TransactionCoordinatorFenced = _error(
    "TransactionCoordinatorFenced", Reason.TRANSACTION_COORDINATOR_FENCED, "The coordinator epoch is stale."
)
TransactionalIdNotFound = _error(
    "TransactionalIdNotFound", Reason.TRANSACTIONAL_ID_NOT_FOUND, "No transactional id of that name."
)
TransactionAbortable = _error(
    "TransactionAbortable", Reason.TRANSACTION_ABORTABLE, "The transaction must be aborted and retried."
)
UnstableOffsetCommit = _error(
    "UnstableOffsetCommit", Reason.UNSTABLE_OFFSET_COMMIT, "A transactional offset commit is still pending."
)
IllegalGeneration = _error("IllegalGeneration", Reason.ILLEGAL_GENERATION, "The group generation is stale.")
UnknownMemberId = _error("UnknownMemberId", Reason.UNKNOWN_MEMBER_ID, "The member id is not in the group.")
StaleRequesterEpoch = _error(
    "StaleRequesterEpoch", Reason.STALE_REQUESTER_EPOCH, "The requester epoch is older than the stored one."
)
ProducerIdSpaceExhausted = _error(
    "ProducerIdSpaceExhausted", Reason.PRODUCER_ID_SPACE_EXHAUSTED, "No producer ids are left."
)
RequestTimedOut = _error("RequestTimedOut", Reason.REQUEST_TIMED_OUT, "The request did not finish in time.")
StorageUnavailable = _error(
    "StorageUnavailable", Reason.STORAGE_UNAVAILABLE, "The database or disk could not be reached."
)
NetworkException = _error(
    "NetworkException", Reason.NETWORK_EXCEPTION, "The server could not be reached or the connection broke."
)
InvalidReplicationFactor = _error(
    "InvalidReplicationFactor",
    Reason.INVALID_REPLICATION_FACTOR,
    "The replication factor is below 1 or above the number of live storage nodes.",
)
NotEnoughReplicas = _error(
    "NotEnoughReplicas",
    Reason.NOT_ENOUGH_REPLICAS,
    "Fewer in-sync replicas than the topic's min_insync_replicas; retry once replicas are back.",
)
StaleMemberEpoch = _error(
    "StaleMemberEpoch", Reason.STALE_MEMBER_EPOCH, "The member epoch is older than the member's current one."
)
FencedMemberEpoch = _error(
    "FencedMemberEpoch", Reason.FENCED_MEMBER_EPOCH, "The member epoch is not one the group gave this member."
)
UnreleasedInstanceId = _error(
    "UnreleasedInstanceId", Reason.UNRELEASED_INSTANCE_ID, "The static instance id is held by an active member."
)
UnsupportedAssignor = _error(
    "UnsupportedAssignor", Reason.UNSUPPORTED_ASSIGNOR, "No server-side assignor of that name."
)
InvalidRegularExpression = _error(
    "InvalidRegularExpression", Reason.INVALID_REGULAR_EXPRESSION, "The subscription regex does not compile."
)
GroupIdNotFound = _error("GroupIdNotFound", Reason.GROUP_ID_NOT_FOUND, "No consumer group of that id.")
NonEmptyGroup = _error("NonEmptyGroup", Reason.NON_EMPTY_GROUP, "The group still has members.")

_BY_REASON: dict[Reason, type[OncelogError]] = {
    cls.reason: cls for cls in list(globals().values()) if isinstance(cls, type) and issubclass(cls, OncelogError)
}


def error_for(reason: Reason, message: str, **kwargs: object) -> OncelogError:
    """Build the error class registered for ``reason`` (used when decoding wire errors)."""
    cls = _BY_REASON.get(reason, OncelogError)
    err = cls(message, **kwargs)  # type: ignore[arg-type]
    err.reason = reason
    return err


__all__ = [name for name, value in globals().items() if isinstance(value, type) and issubclass(value, OncelogError)]
__all__ += ["Reason", "ReasonInfo", "REASONS", "error_for"]
