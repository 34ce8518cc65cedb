'use strict';
/**
 * Kafka RecordBatch v2, the bytes oncelog stores and serves (DESIGN §4): encode a batch of records,
 * decode fetched batches, and filter them for a read_committed reader.
 *
 * Layout (big-endian), from Kafka's DefaultRecordBatch:
 *   baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 (2) | crc uint32 |
 *   attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 | maxTimestamp int64 |
 *   producerId int64 | producerEpoch int16 | baseSequence int32 | recordCount int32 | records...
 * The CRC is CRC32C (Castagnoli) over everything from attributes to the end. Each record is
 *   length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
 *   keyLength varint | key | valueLength varint | value | headerCount varint | headers...
 * with zigzag varints (-1 length = null).
 */

const zlib = require('node:zlib');

const MAGIC = 2;
const HEADER_BYTES = 61;
const LOG_OVERHEAD = 12; // baseOffset + batchLength, not counted in batchLength
const CRC_OFFSET = 17;
const ATTRIBUTES_OFFSET = 21;
const COMPRESSION_MASK = 0x07;
const TRANSACTIONAL_MASK = 0x10;
const CONTROL_MASK = 0x20;
const CONTROL_TYPES = { 0: 'ABORT', 1: 'COMMIT' };

// ------------------------------------------------------------------------------------------ CRC32C

const CRC32C_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0x82f63b78 ^ (c >>> 1) : c >>> 1; // reflected Castagnoli polynomial
    table[n] = c >>> 0;
  }
  return table;
})();

/** CRC32C of a Buffer, as an unsigned 32-bit number. */
function crc32c(buf) {
  let c = 0xffffffff;
  for (let i = 0; i < buf.length; i++) c = CRC32C_TABLE[(c ^ buf[i]) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

// ------------------------------------------------------------------------------------------ varints

/** Zigzag varint of a (safe) integer or BigInt, as Kafka's ByteUtils.writeVarlong. */
function encodeVarint(value) {
  const v = BigInt(value);
  let zigzag = v >= 0n ? v << 1n : ((-v) << 1n) - 1n;
  const out = [];
  while (zigzag >= 0x80n) {
    out.push(Number((zigzag & 0x7fn) | 0x80n));
    zigzag >>= 7n;
  }
  out.push(Number(zigzag));
  return Buffer.from(out);
}

/** Read a zigzag varint at ``pos``; returns [value as Number, next position]. */
function decodeVarint(buf, pos) {
  let raw = 0n;
  let shift = 0n;
  for (;;) {
    if (pos >= buf.length) throw new Error('truncated varint');
    const byte = buf[pos++];
    raw |= BigInt(byte & 0x7f) << shift;
    if (!(byte & 0x80)) break;
    shift += 7n;
    if (shift > 63n) throw new Error('varint longer than 10 bytes');
  }
  const value = raw & 1n ? -((raw + 1n) >> 1n) : raw >> 1n;
  return [Number(value), pos];
}

function bytesOrNull(data) {
  if (data === null || data === undefined) return null;
  return Buffer.isBuffer(data) ? data : Buffer.from(String(data), 'utf8');
}

// ------------------------------------------------------------------------------------------ encode

/** One record (length prefix included) at ``offsetDelta``, ``timestampDelta`` ms after the batch timestamp. */
function encodeRecord(record, offsetDelta, timestampDelta) {
  const key = bytesOrNull(record.key);
  const value = bytesOrNull(record.value);
  const headers = record.headers || [];
  const parts = [
    Buffer.from([0]), // record attributes (unused)
    encodeVarint(timestampDelta),
    encodeVarint(offsetDelta),
    encodeVarint(key === null ? -1 : key.length),
    key || Buffer.alloc(0),
    encodeVarint(value === null ? -1 : value.length),
    value || Buffer.alloc(0),
    encodeVarint(headers.length),
  ];
  for (const [headerKey, headerValue] of headers) {
    const k = Buffer.from(String(headerKey), 'utf8');
    const v = bytesOrNull(headerValue);
    parts.push(encodeVarint(k.length), k, encodeVarint(v === null ? -1 : v.length), v || Buffer.alloc(0));
  }
  const body = Buffer.concat(parts);
  return Buffer.concat([encodeVarint(body.length), body]);
}

function assemble(section, { baseOffset, partitionLeaderEpoch, attributes, lastOffsetDelta, baseTimestamp, maxTimestamp,
  producerId, producerEpoch, baseSequence, recordCount }) {
  const batch = Buffer.alloc(HEADER_BYTES + section.length);
  batch.writeBigInt64BE(BigInt(baseOffset), 0);
  batch.writeInt32BE(batch.length - LOG_OVERHEAD, 8);
  batch.writeInt32BE(Number(partitionLeaderEpoch), 12);
  batch.writeInt8(MAGIC, 16);
  batch.writeInt16BE(attributes, ATTRIBUTES_OFFSET);
  batch.writeInt32BE(lastOffsetDelta, 23);
  batch.writeBigInt64BE(BigInt(baseTimestamp), 27);
  batch.writeBigInt64BE(BigInt(maxTimestamp), 35);
  batch.writeBigInt64BE(BigInt(producerId), 43);
  batch.writeInt16BE(Number(producerEpoch), 51);
  batch.writeInt32BE(Number(baseSequence), 53);
  batch.writeInt32BE(recordCount, 57);
  section.copy(batch, HEADER_BYTES);
  batch.writeUInt32BE(crc32c(batch.subarray(ATTRIBUTES_OFFSET)), CRC_OFFSET);
  return batch;
}

/**
 * Encode records as one CREATE_TIME batch, as a Kafka producer would.
 *
 * @param {Array<{key?: string|Buffer|null, value: string|Buffer|null, timestamp?: number,
 *   headers?: Array<[string, string|Buffer|null]>}>} records at least one; a record without a timestamp
 *   takes the batch timestamp
 * @param {object} opts producerId, producerEpoch, baseSequence (-1/-1/-1 for a plain producer),
 *   transactional, timestamp (ms, default now), compression ('none' or 'gzip'), and the fields the partition
 *   leader stamps: baseOffset (0) and partitionLeaderEpoch (-1)
 * @returns {Buffer} the batch
 */
function buildBatch(records, { producerId = -1, producerEpoch = -1, baseSequence = -1, transactional = false,
  timestamp = Date.now(), compression = 'none', baseOffset = 0, partitionLeaderEpoch = -1 } = {}) {
  if (!records.length) throw new Error('a RecordBatch needs at least one record');
  if (transactional && BigInt(producerId) < 0n) throw new Error('a transactional batch needs a producer id');
  let maxTimestamp = null;
  const encoded = records.map((record, offsetDelta) => {
    const ts = record.timestamp === undefined || record.timestamp === null ? timestamp : record.timestamp;
    if (maxTimestamp === null || ts > maxTimestamp) maxTimestamp = ts;
    return encodeRecord(record, offsetDelta, BigInt(ts) - BigInt(timestamp));
  });
  let section = Buffer.concat(encoded);
  let attributes = transactional ? TRANSACTIONAL_MASK : 0;
  if (compression === 'gzip') {
    section = zlib.gzipSync(section, { level: 6 });
    attributes |= 1;
  } else if (compression !== 'none') {
    throw new Error(`compression ${compression} is not supported by this example (use none or gzip)`);
  }
  return assemble(section, {
    baseOffset,
    partitionLeaderEpoch,
    attributes,
    lastOffsetDelta: records.length - 1,
    baseTimestamp: timestamp,
    maxTimestamp,
    producerId,
    producerEpoch,
    baseSequence,
    recordCount: records.length,
  });
}

/** A COMMIT or ABORT transaction marker (MemoryRecords.withEndTransactionMarker); type is 'COMMIT' or 'ABORT'. */
function buildControlBatch(type, { producerId, producerEpoch, coordinatorEpoch, timestamp, baseOffset = 0,
  partitionLeaderEpoch = -1 }) {
  const key = Buffer.alloc(4);
  key.writeInt16BE(0, 0);
  key.writeInt16BE(type === 'COMMIT' ? 1 : 0, 2);
  const value = Buffer.alloc(6);
  value.writeInt16BE(0, 0);
  value.writeInt32BE(coordinatorEpoch, 2);
  return assemble(encodeRecord({ key, value }, 0, 0), {
    baseOffset,
    partitionLeaderEpoch,
    attributes: TRANSACTIONAL_MASK | CONTROL_MASK,
    lastOffsetDelta: 0,
    baseTimestamp: timestamp,
    maxTimestamp: timestamp,
    producerId,
    producerEpoch,
    baseSequence: -1,
    recordCount: 1,
  });
}

// ------------------------------------------------------------------------------------------ decode

/** Split fetched bytes into batches: [{header fields..., records: [...] | null, control: type | null}]. */
function decodeBatches(data) {
  const buf = Buffer.from(data);
  const batches = [];
  let pos = 0;
  while (pos < buf.length) {
    if (buf.length - pos < HEADER_BYTES) throw new Error(`truncated batch header at byte ${pos}`);
    const batchLength = buf.readInt32BE(pos + 8);
    const end = pos + LOG_OVERHEAD + batchLength;
    if (end > buf.length) throw new Error(`truncated batch at byte ${pos}`);
    const bytes = buf.subarray(pos, end);
    if (bytes.readInt8(16) !== MAGIC) throw new Error(`unsupported magic ${bytes.readInt8(16)} at byte ${pos}`);
    if (crc32c(bytes.subarray(ATTRIBUTES_OFFSET)) !== bytes.readUInt32BE(CRC_OFFSET)) {
      throw new Error(`CRC32C mismatch in the batch at byte ${pos}`);
    }
    const attributes = bytes.readInt16BE(ATTRIBUTES_OFFSET);
    const baseOffset = bytes.readBigInt64BE(0);
    const header = {
      baseOffset,
      lastOffset: baseOffset + BigInt(bytes.readInt32BE(23)),
      baseTimestamp: bytes.readBigInt64BE(27),
      producerId: bytes.readBigInt64BE(43),
      producerEpoch: bytes.readInt16BE(51),
      baseSequence: bytes.readInt32BE(53),
      partitionLeaderEpoch: bytes.readInt32BE(12),
      transactional: (attributes & TRANSACTIONAL_MASK) !== 0,
      isControl: (attributes & CONTROL_MASK) !== 0,
    };
    const records = decodeRecords(header, attributes & COMPRESSION_MASK, bytes.subarray(HEADER_BYTES),
      bytes.readInt32BE(57));
    header.records = records;
    header.control = header.isControl ? CONTROL_TYPES[records[0].key.readInt16BE(2)] || 'UNKNOWN' : null;
    batches.push(header);
    pos = end;
  }
  return batches;
}

function decodeRecords(header, compression, section, count) {
  let data = section;
  if (compression === 1) data = zlib.gunzipSync(section);
  else if (compression !== 0) {
    throw new Error(`compression codec ${compression} is not supported by this example (use none or gzip)`);
  }
  const records = [];
  let pos = 0;
  for (let i = 0; i < count; i++) {
    let length;
    [length, pos] = decodeVarint(data, pos);
    const end = pos + length;
    pos += 1; // record attributes
    let timestampDelta;
    let offsetDelta;
    let keyLength;
    let valueLength;
    let headerCount;
    [timestampDelta, pos] = decodeVarint(data, pos);
    [offsetDelta, pos] = decodeVarint(data, pos);
    [keyLength, pos] = decodeVarint(data, pos);
    const key = keyLength < 0 ? null : data.subarray(pos, pos + keyLength);
    pos += Math.max(keyLength, 0);
    [valueLength, pos] = decodeVarint(data, pos);
    const value = valueLength < 0 ? null : data.subarray(pos, pos + valueLength);
    pos += Math.max(valueLength, 0);
    [headerCount, pos] = decodeVarint(data, pos);
    const headers = [];
    for (let h = 0; h < headerCount; h++) {
      let headerKeyLength;
      let headerValueLength;
      [headerKeyLength, pos] = decodeVarint(data, pos);
      const headerKey = data.subarray(pos, pos + headerKeyLength).toString('utf8');
      pos += headerKeyLength;
      [headerValueLength, pos] = decodeVarint(data, pos);
      headers.push([headerKey, headerValueLength < 0 ? null : data.subarray(pos, pos + headerValueLength)]);
      pos += Math.max(headerValueLength, 0);
    }
    if (pos !== end) throw new Error('record framing does not add up');
    records.push({
      offset: header.baseOffset + BigInt(offsetDelta),
      timestamp: header.baseTimestamp + BigInt(timestampDelta),
      key,
      value,
      headers,
    });
  }
  return records;
}

/**
 * Records a read_committed consumer keeps (Kafka's CompletedFetch): drop the transactional data of
 * aborted transactions (from the fetch's aborted list) and every control batch.
 *
 * @param {Array} batches from decodeBatches
 * @param {Array<{producer_id: string|number, first_offset: string|number}>} abortedTransactions
 * @param {bigint} fetchOffset records before it are skipped
 */
function readCommitted(batches, abortedTransactions, fetchOffset = 0n) {
  const pending = abortedTransactions
    .map((t) => ({ producerId: BigInt(t.producer_id), firstOffset: BigInt(t.first_offset) }))
    .sort((a, b) => (a.firstOffset < b.firstOffset ? -1 : a.firstOffset > b.firstOffset ? 1 : 0));
  const aborted = new Set();
  const kept = [];
  for (const batch of batches) {
    if (batch.producerId >= 0n) {
      while (pending.length && pending[0].firstOffset <= batch.lastOffset) aborted.add(pending.shift().producerId);
      if (batch.isControl) {
        // an ABORT marker ends that aborted transaction; the producer's later data is new
        if (batch.control === 'ABORT') aborted.delete(batch.producerId);
        continue;
      }
      if (batch.transactional && aborted.has(batch.producerId)) continue;
    }
    if (batch.isControl) continue;
    for (const record of batch.records) if (record.offset >= fetchOffset) kept.push(record);
  }
  return kept;
}

module.exports = { buildBatch, buildControlBatch, crc32c, decodeBatches, decodeVarint, encodeVarint, readCommitted };
