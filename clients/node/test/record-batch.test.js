'use strict';
// RecordBatch v2 codec of the example: CRC32C check value, varints, and the read_committed filter.

const test = require('node:test');
const assert = require('node:assert/strict');
const { buildBatch, crc32c, decodeBatches, decodeVarint, encodeVarint, readCommitted } = require('../record-batch');

test('crc32c matches the Castagnoli check value', () => {
  assert.equal(crc32c(Buffer.from('123456789')), 0xe3069283);
  assert.equal(crc32c(Buffer.alloc(0)), 0);
});

test('zigzag varints round-trip like Kafka ByteUtils', () => {
  assert.deepEqual([...encodeVarint(0)], [0]);
  assert.deepEqual([...encodeVarint(-1)], [1]);
  assert.deepEqual([...encodeVarint(1)], [2]);
  assert.deepEqual([...encodeVarint(300)], [0xd8, 0x04]);
  for (const value of [0, 1, -1, 63, -64, 64, 2 ** 31 - 1, -(2 ** 31), 1_700_000_000_000]) {
    assert.deepEqual(decodeVarint(encodeVarint(value), 0), [value, encodeVarint(value).length]);
  }
});

test('a built batch decodes to its records, header fields and a valid CRC', () => {
  const batch = buildBatch([{ key: 'k', value: 'a' }, { key: null, value: 'bb' }], {
    producerId: 4242, producerEpoch: 3, baseSequence: 7, transactional: true, timestamp: 1_700_000_000_000,
  });
  const [decoded] = decodeBatches(batch);
  assert.equal(decoded.producerId, 4242n);
  assert.equal(decoded.producerEpoch, 3);
  assert.equal(decoded.transactional, true);
  assert.equal(decoded.isControl, false);
  assert.equal(decoded.lastOffset, 1n);
  assert.deepEqual(decoded.records.map((r) => [r.offset, r.key && r.key.toString(), r.value.toString()]),
    [[0n, 'k', 'a'], [1n, null, 'bb']]);
  const damaged = Buffer.from(batch);
  damaged[damaged.length - 1] ^= 0xff;
  assert.throws(() => decodeBatches(damaged), /CRC32C mismatch/);
});

function at(batch, baseOffset) {
  const copy = Buffer.from(batch);
  copy.writeBigInt64BE(BigInt(baseOffset), 0); // outside the CRC, as the partition leader does it
  return copy;
}

function marker(type, producerId, offset) {
  // control batch: key = (version 0, type), value = (version 0, coordinator epoch 0)
  const batch = buildBatch([{ key: Buffer.from([0, 0, 0, type === 'COMMIT' ? 1 : 0]), value: Buffer.alloc(6) }],
    { producerId, producerEpoch: 1, baseSequence: -1, transactional: true });
  batch.writeInt16BE(0x30, 21);
  batch.writeUInt32BE(crc32c(batch.subarray(21)), 17);
  return at(batch, offset);
}

test('read_committed drops aborted transactional data and every marker, keeps the rest in order', () => {
  const data = Buffer.concat([
    at(buildBatch([{ value: 'kept-1' }], { producerId: 1, producerEpoch: 0, baseSequence: 0, transactional: true }), 0),
    at(buildBatch([{ value: 'dropped' }], { producerId: 2, producerEpoch: 0, baseSequence: 0, transactional: true }), 1),
    at(buildBatch([{ value: 'plain' }]), 2),
    marker('COMMIT', 1, 3),
    marker('ABORT', 2, 4),
    at(buildBatch([{ value: 'kept-2' }], { producerId: 2, producerEpoch: 1, baseSequence: 0, transactional: true }), 5),
  ]);
  const kept = readCommitted(decodeBatches(data), [{ producer_id: '2', first_offset: '1' }]);
  assert.deepEqual(kept.map((r) => r.value.toString()), ['kept-1', 'plain', 'kept-2']);
  assert.deepEqual(readCommitted(decodeBatches(data), [], 2n).map((r) => r.value.toString()), ['plain', 'kept-2']);
});
