"""Kafka RecordBatch v2 codec shared by the partition storage server and the client library."""

from oncelog.records.batch import (
    BATCH_OVERHEAD,
    LOG_OVERHEAD,
    MAGIC,
    BatchHeader,
    Record,
    RecordFields,
    TimestampType,
    batches_end_offset,
    decode_record_fields,
    decode_records,
    iter_batches,
    read_control_record,
    read_header,
    split_batches,
    validate_batch,
    with_base_offset,
)
from oncelog.records.builder import RecordsBuilder, build_batch, build_control_batch
from oncelog.records.compression import Compression
from oncelog.vocabulary import ControlType

__all__ = [
    "BATCH_OVERHEAD",
    "LOG_OVERHEAD",
    "MAGIC",
    "BatchHeader",
    "Compression",
    "ControlType",
    "Record",
    "RecordFields",
    "RecordsBuilder",
    "TimestampType",
    "batches_end_offset",
    "build_batch",
    "build_control_batch",
    "decode_record_fields",
    "decode_records",
    "iter_batches",
    "read_control_record",
    "read_header",
    "split_batches",
    "validate_batch",
    "with_base_offset",
]
