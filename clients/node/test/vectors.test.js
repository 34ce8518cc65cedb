'use strict';
// The shared RecordBatch v2 vectors of testdata/record-batches: built byte for byte and decoded alike.

const fs = require('node:fs');
const path = require('node:path');
const test = require('node:test');
const assert = require('node:assert/strict');
const { buildBatch, buildControlBatch, decodeBatches } = require('../record-batch');

const DIR = process.env.ONCELOG_VECTOR_DIR || path.resolve(__dirname, '..', '..', '..', 'testdata', 'record-batches');
const { vectors } = JSON.parse(fs.readFileSync(path.join(DIR, 'vectors.json'), 'utf8'));

const hex = (h) => (h === null ? null : Buffer.from(h, 'hex'));
const records = (spec) => spec.map((r) => ({
  key: hex(r.key),
  value: hex(r.value),
  timestamp: r.timestamp,
  headers: r.headers.map(([k, v]) => [k, hex(v)]),
}));

function encode(vector) {
  if (vector.kind === 'control') {
    const c = vector.control;
    return buildControlBatch(c.type, {
      producerId: c.producer_id,
      producerEpoch: c.producer_epoch,
      coordinatorEpoch: c.coordinator_epoch,
      timestamp: c.timestamp,
      baseOffset: c.base_offset,
      partitionLeaderEpoch: c.partition_leader_epoch,
    });
  }
  const b = vector.batch;
  return buildBatch(records(vector.records), {
    producerId: b.producer_id,
    producerEpoch: b.producer_epoch,
    baseSequence: b.base_sequence,
    transactional: b.transactional,
    timestamp: b.base_timestamp,
    compression: b.compression,
    baseOffset: b.base_offset,
    partitionLeaderEpoch: b.partition_leader_epoch,
  });
}

function assertSameRecords(vector, decoded) {
  const want = records(vector.records);
  assert.equal(decoded.length, want.length);
  want.forEach((r, i) => {
    assert.deepEqual(decoded[i].key, r.key, `key of record ${i}`);
    assert.deepEqual(decoded[i].value, r.value, `value of record ${i}`);
    assert.equal(decoded[i].timestamp, BigInt(r.timestamp), `timestamp of record ${i}`);
    assert.deepEqual(decoded[i].headers.map(([k, v]) => [k, v && Buffer.from(v)]), r.headers);
  });
}

for (const vector of vectors) {
  test(`vector ${vector.name}: ${vector.description}`, () => {
    const expected = fs.readFileSync(path.join(DIR, `${vector.name}.bin`));
    const built = encode(vector);
    if (vector.byte_exact) assert.equal(built.toString('hex'), expected.toString('hex'));
    const [batch, ...rest] = decodeBatches(expected);
    assert.equal(rest.length, 0);
    if (vector.kind === 'control') {
      assert.equal(batch.control, vector.control.type);
      assert.equal(batch.producerId, BigInt(vector.control.producer_id));
      assert.ok(batch.isControl && batch.transactional);
      return;
    }
    assert.equal(batch.producerId, BigInt(vector.batch.producer_id));
    assert.equal(batch.baseSequence, vector.batch.base_sequence);
    assert.equal(batch.baseOffset, BigInt(vector.batch.base_offset));
    assert.equal(batch.transactional, vector.batch.transactional);
    assertSameRecords(vector, batch.records);
    // this encoder's own batch (its own gzip for the compressed vector) decodes to the same records
    assertSameRecords(vector, decodeBatches(built)[0].records);
  });
}

test('every vector kind is covered', () => {
  const names = vectors.map((v) => v.name);
  for (const name of ['plain', 'transactional', 'control-commit', 'control-abort', 'gzip']) assert.ok(names.includes(name));
});
