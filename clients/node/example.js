#!/usr/bin/env node
'use strict';
/**
 * oncelog from Node.js with nothing but @grpc/grpc-js and the .proto files of this repository.
 *
 *   node example.js --bootstrap 127.0.0.1:7001 [--topic node-example] [--transactional-id node-example] [--json]
 *
 * Against a running cluster (`oncelog dev`, or a port-forwarded Kubernetes deployment) it
 *   1. creates a topic with two partitions (ClusterService.CreateTopics),
 *   2. runs an idempotent produce: InitProducerId with an empty transactional id gives a producer id at
 *      epoch 0, and the batch carries (producer id, epoch, sequence), so a retry is written once,
 *   3. runs a transaction over both partitions and commits it: InitProducerId, AddPartitionsToTxn,
 *      Produce of transactional batches, EndTxn COMMIT,
 *   4. runs a second transaction and aborts it,
 *   5. reads both partitions read_committed and prints what a consumer keeps: the idempotent and committed
 *      records, never the aborted ones and never the transaction markers.
 *
 * Every failed call carries an oncelog.api.common.v1.ErrorInfo in its grpc-status-details-bin trailer; calls
 * whose ErrorInfo says `retriable` are retried with the same request (an EndTxn retry is recognised by the
 * coordinator, so this never commits twice). TLS: set ONCELOG_TLS_CA (and ONCELOG_TLS_CERT/KEY for mTLS).
 */

const fs = require('node:fs');
const path = require('node:path');
const { parseArgs } = require('node:util');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protobuf = require('protobufjs');
const { buildBatch, decodeBatches, readCommitted } = require('./record-batch');

const PROTO_ROOT = process.env.ONCELOG_PROTO_DIR || path.resolve(__dirname, '..', '..', 'proto');
const PROTO_FILES = [
  'oncelog/api/cluster/v1/cluster_service.proto',
  'oncelog/api/txn/v1/transaction_coordinator_service.proto',
  'oncelog/api/storage/v1/partition_storage_service.proto',
];
const LOADER_OPTIONS = { keepCase: true, longs: String, enums: String, defaults: true, oneofs: true };

const api = grpc.loadPackageDefinition(
  protoLoader.loadSync(PROTO_FILES, { ...LOADER_OPTIONS, includeDirs: [PROTO_ROOT] }),
).oncelog.api;

// ------------------------------------------------------------------------------------------ errors

// google.rpc.Status wraps the ErrorInfo as an Any; it is not part of proto/, so it is declared here.
const statusRoot = protobuf.Root.fromJSON({
  nested: {
    google: {
      nested: {
        protobuf: { nested: { Any: { fields: { type_url: { type: 'string', id: 1 }, value: { type: 'bytes', id: 2 } } } } },
        rpc: {
          nested: {
            Status: {
              fields: {
                code: { type: 'int32', id: 1 },
                message: { type: 'string', id: 2 },
                details: { rule: 'repeated', type: 'google.protobuf.Any', id: 3 },
              },
            },
          },
        },
      },
    },
  },
});
const Status = statusRoot.lookupType('google.rpc.Status');
const ErrorInfo = new protobuf.Root()
  .loadSync(path.join(PROTO_ROOT, 'oncelog/api/common/v1/errors.proto'), { keepCase: true })
  .lookupType('oncelog.api.common.v1.ErrorInfo');

/** The ErrorInfo of a failed call ({reason, message, retriable, definite, metadata}), or null. */
function errorInfo(err) {
  const raw = err && err.metadata && err.metadata.get('grpc-status-details-bin')[0];
  if (!raw) return null;
  for (const detail of Status.decode(raw).details) {
    if (detail.type_url.endsWith('/oncelog.api.common.v1.ErrorInfo')) {
      return ErrorInfo.toObject(ErrorInfo.decode(detail.value), { enums: String, defaults: true });
    }
  }
  return null;
}

function reasonOf(err) {
  const info = errorInfo(err);
  return info ? info.reason.replace(/^ERROR_REASON_/, '') : grpc.status[err.code];
}

// ------------------------------------------------------------------------------------------ calls

function credentials() {
  const ca = process.env.ONCELOG_TLS_CA;
  if (!ca) return grpc.credentials.createInsecure();
  const read = (name) => (process.env[name] ? fs.readFileSync(process.env[name]) : null);
  return grpc.credentials.createSsl(fs.readFileSync(ca), read('ONCELOG_TLS_KEY'), read('ONCELOG_TLS_CERT'));
}

const clients = new Map();

/** One client per (service, address), like one channel per node. */
function client(Service, address) {
  const key = `${Service.serviceName}@${address}`;
  if (!clients.has(key)) clients.set(key, new Service(address, credentials()));
  return clients.get(key);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Call ``method`` and retry it while the server says the same request may succeed later. */
async function call(stub, method, request, { attempts = 50, timeoutMs = 10_000 } = {}) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await new Promise((resolve, reject) => {
        stub[method](request, { deadline: Date.now() + timeoutMs }, (err, response) => (err ? reject(err) : resolve(response)));
      });
    } catch (err) {
      const info = errorInfo(err);
      const retriable = info ? info.retriable : err.code === grpc.status.UNAVAILABLE;
      if (!retriable || attempt >= attempts) {
        err.reason = reasonOf(err);
        err.message = `${method}: ${err.reason}: ${info ? info.message : err.details}`;
        throw err;
      }
      await sleep(Math.min(20 * 2 ** attempt, 500));
    }
  }
}

// ------------------------------------------------------------------------------------------ the example

function parseOptions() {
  const { values } = parseArgs({
    options: {
      bootstrap: { type: 'string', default: process.env.ONCELOG_BOOTSTRAP || '' },
      topic: { type: 'string', default: 'node-example' },
      'transactional-id': { type: 'string', default: 'node-example' },
      json: { type: 'boolean', default: false },
    },
  });
  if (!values.bootstrap) {
    throw new Error('give the address of any oncelog service: --bootstrap host:port (or ONCELOG_BOOTSTRAP)');
  }
  return values;
}

class Example {
  constructor({ bootstrap, topic, transactionalId, log }) {
    this.cluster = client(api.cluster.v1.ClusterService, bootstrap);
    this.topic = topic;
    this.transactionalId = transactionalId;
    this.log = log;
    this.sequences = new Map(); // "producerId/epoch/partition" -> next sequence
  }

  async createTopic() {
    try {
      await call(this.cluster, 'CreateTopics', { topics: [{ name: this.topic, partitions: 2 }] });
      this.log(`created topic ${this.topic} with 2 partitions`);
    } catch (err) {
      if (err.reason !== 'TOPIC_ALREADY_EXISTS') throw err;
      this.log(`topic ${this.topic} exists already`);
    }
    const metadata = await call(this.cluster, 'Metadata', { topics: [this.topic] });
    this.partitions = metadata.topics[0].partitions.map((p) => ({
      partition: p.partition,
      leader: p.leader_address,
      leaderEpoch: p.leader_epoch,
    }));
  }

  async coordinator(transactionalId) {
    if (!transactionalId) {
      // any coordinator replica hands out idempotent-only producer ids
      const described = await call(this.cluster, 'DescribeCluster', {});
      const node = described.nodes.find((n) => n.role === 'SERVICE_ROLE_TXN_COORDINATOR');
      if (!node) throw new Error('no txn-coordinator is registered in the cluster');
      return client(api.txn.v1.TransactionCoordinatorService, node.address);
    }
    const found = await call(this.cluster, 'FindCoordinator', { key: transactionalId, type: 'COORDINATOR_TYPE_TRANSACTION' });
    return client(api.txn.v1.TransactionCoordinatorService, found.address);
  }

  async initProducerId(transactionalId) {
    const coordinator = await this.coordinator(transactionalId);
    const response = await call(coordinator, 'InitProducerId', {
      transactional_id: transactionalId,
      transaction_timeout_ms: 60_000,
    });
    return response.producer; // { producer_id: string, producer_epoch: number }
  }

  /** One batch of ``values`` to ``partition``; returns the offset of its first record. */
  async produce(partition, producer, values, transactionalId = '') {
    const { leader, leaderEpoch } = this.partitions[partition];
    const key = `${producer.producer_id}/${producer.producer_epoch}/${partition}`;
    const baseSequence = this.sequences.get(key) || 0; // a new epoch starts its sequences at 0
    const records = buildBatch(
      values.map((value) => ({ key: `p${partition}`, value })),
      {
        producerId: producer.producer_id,
        producerEpoch: producer.producer_epoch,
        baseSequence,
        transactional: Boolean(transactionalId),
      },
    );
    const storage = client(api.storage.v1.PartitionStorageService, leader);
    const response = await call(storage, 'Produce', {
      transactional_id: transactionalId,
      acks: 'ACKS_ALL',
      partitions: [{ topic_partition: { topic: this.topic, partition }, leader_epoch: leaderEpoch, records }],
    });
    const result = response.results[0];
    if (result.error) {
      throw new Error(`produce to ${this.topic}-${partition}: ${result.error.reason}: ${result.error.message}`);
    }
    this.sequences.set(key, baseSequence + values.length);
    return Number(result.base_offset);
  }

  async idempotentProduce() {
    const producer = await this.initProducerId('');
    const values = ['idempotent-0', 'idempotent-1', 'idempotent-2'];
    const offset = await this.produce(0, producer, values);
    this.log(`idempotent producer ${producer.producer_id} epoch ${producer.producer_epoch}: wrote ${values.length} records at ${this.topic}-0@${offset}`);
    return values;
  }

  /** One transaction over both partitions, committed or aborted; returns [values, next producer identity]. */
  async transaction(producer, result, label) {
    const tid = this.transactionalId;
    const coordinator = await this.coordinator(tid);
    const partitions = this.partitions.map((p) => ({ topic: this.topic, partition: p.partition }));
    // CONCURRENT_TRANSACTIONS (retriable) while the previous transaction's markers are being written
    await call(coordinator, 'AddPartitionsToTxn', { transactional_id: tid, producer, partitions });
    const values = [];
    for (const { partition } of this.partitions) {
      const batch = [`${label}-p${partition}-0`, `${label}-p${partition}-1`];
      await this.produce(partition, producer, batch, tid);
      values.push(...batch);
    }
    const ended = await call(coordinator, 'EndTxn', { transactional_id: tid, producer, result });
    this.log(`transaction of ${tid} (producer ${producer.producer_id} epoch ${producer.producer_epoch}): ${result.replace('TRANSACTION_RESULT_', '').toLowerCase()} of ${values.length} records`);
    return [values, ended.producer]; // the epoch is bumped on every EndTxn (KIP-890)
  }

  /** Read a partition read_committed from offset 0 until every transaction on it is decided. */
  async readCommitted(partition, deadlineMs = 30_000) {
    const { leader, leaderEpoch } = this.partitions[partition];
    const storage = client(api.storage.v1.PartitionStorageService, leader);
    const deadline = Date.now() + deadlineMs;
    let position = 0n;
    const kept = [];
    for (;;) {
      const response = await call(storage, 'Fetch', {
        partitions: [{ topic_partition: { topic: this.topic, partition }, fetch_offset: position.toString(), leader_epoch: leaderEpoch }],
        isolation_level: 'ISOLATION_LEVEL_READ_COMMITTED',
        max_wait_ms: 200,
      });
      const result = response.results[0];
      if (result.error) throw new Error(`fetch ${this.topic}-${partition}: ${result.error.reason}: ${result.error.message}`);
      const batches = decodeBatches(result.records);
      for (const record of readCommitted(batches, result.aborted_transactions, position)) {
        kept.push({ partition, offset: Number(record.offset), value: record.value && record.value.toString('utf8') });
      }
      if (batches.length) position = batches[batches.length - 1].lastOffset + 1n;
      const lso = BigInt(result.last_stable_offset);
      // done once caught up with a stable end: nothing is undecided and nothing is left to read
      if (position >= lso && lso === BigInt(result.high_watermark)) return kept;
      if (Date.now() > deadline) throw new Error(`${this.topic}-${partition}: the last stable offset did not catch up`);
    }
  }
}

async function main() {
  const options = parseOptions();
  const log = options.json ? (line) => process.stderr.write(`${line}\n`) : (line) => console.log(line);
  const example = new Example({
    bootstrap: options.bootstrap,
    topic: options.topic,
    transactionalId: options['transactional-id'],
    log,
  });
  await example.createTopic();
  const idempotent = await example.idempotentProduce();
  let producer = await example.initProducerId(example.transactionalId);
  let committed;
  let aborted;
  [committed, producer] = await example.transaction(producer, 'TRANSACTION_RESULT_COMMIT', 'committed');
  [aborted, producer] = await example.transaction(producer, 'TRANSACTION_RESULT_ABORT', 'aborted');
  const kept = [];
  for (const { partition } of example.partitions) kept.push(...(await example.readCommitted(partition)));
  if (options.json) {
    process.stdout.write(`${JSON.stringify({ topic: example.topic, produced: { idempotent, committed, aborted }, kept })}\n`);
  } else {
    log(`read_committed sees ${kept.length} records:`);
    for (const record of kept) log(`  ${example.topic}-${record.partition}@${record.offset} ${record.value}`);
  }
  for (const c of clients.values()) c.close();
}

main().catch((err) => {
  process.stderr.write(`oncelog node example failed: ${err.message}\n`);
  process.exit(1);
});
