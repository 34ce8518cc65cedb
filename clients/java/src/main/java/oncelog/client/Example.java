package oncelog.client;

import io.grpc.ManagedChannel;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import oncelog.api.cluster.v1.ClusterServiceGrpc;
import oncelog.api.cluster.v1.ClusterServiceOuterClass.CoordinatorType;
import oncelog.api.cluster.v1.ClusterServiceOuterClass.CreateTopicsRequest;
import oncelog.api.cluster.v1.ClusterServiceOuterClass.DescribeClusterRequest;
import oncelog.api.cluster.v1.ClusterServiceOuterClass.FindCoordinatorRequest;
import oncelog.api.cluster.v1.ClusterServiceOuterClass.MetadataRequest;
import oncelog.api.cluster.v1.ClusterServiceOuterClass.Node;
import oncelog.api.cluster.v1.ClusterServiceOuterClass.PartitionMetadata;
import oncelog.api.cluster.v1.ClusterServiceOuterClass.ServiceRole;
import oncelog.api.cluster.v1.ClusterServiceOuterClass.TopicSpec;
import oncelog.api.common.v1.Identity.ProducerIdentity;
import oncelog.api.common.v1.Marker.TransactionResult;
import oncelog.api.common.v1.Partition.TopicPartition;
import oncelog.api.storage.v1.PartitionStorageServiceGrpc;
import oncelog.api.storage.v1.PartitionStorageServiceOuterClass.Acks;
import oncelog.api.storage.v1.PartitionStorageServiceOuterClass.FetchPartition;
import oncelog.api.storage.v1.PartitionStorageServiceOuterClass.FetchPartitionResult;
import oncelog.api.storage.v1.PartitionStorageServiceOuterClass.FetchRequest;
import oncelog.api.storage.v1.PartitionStorageServiceOuterClass.IsolationLevel;
import oncelog.api.storage.v1.PartitionStorageServiceOuterClass.PartitionBatches;
import oncelog.api.storage.v1.PartitionStorageServiceOuterClass.PartitionProduceResult;
import oncelog.api.storage.v1.PartitionStorageServiceOuterClass.ProduceRequest;
import oncelog.api.txn.v1.TransactionCoordinatorServiceGrpc;
import oncelog.api.txn.v1.TransactionCoordinatorServiceGrpc.TransactionCoordinatorServiceBlockingStub;
import oncelog.api.txn.v1.TransactionCoordinatorServiceOuterClass.AddPartitionsToTxnRequest;
import oncelog.api.txn.v1.TransactionCoordinatorServiceOuterClass.EndTxnRequest;
import oncelog.api.txn.v1.TransactionCoordinatorServiceOuterClass.InitProducerIdRequest;

/**
 * oncelog from Java with grpc-java and the code generated from proto/: it creates a topic with two
 * partitions, writes with an idempotent producer, commits one transaction and aborts another
 * (InitProducerId, AddPartitionsToTxn, Produce of a RecordBatch v2 it builds itself, EndTxn), then reads
 * both partitions read_committed and keeps only the committed records.
 *
 * <pre>mvn -q compile exec:java -Dexec.args="--bootstrap 127.0.0.1:7102"</pre>
 */
public final class Example implements AutoCloseable {
  /** A partition's leader, from ClusterService.Metadata. */
  public record Partition(int partition, String leader, int leaderEpoch) {}

  /** One record a read_committed reader keeps. */
  public record Kept(int partition, long offset, String value) {}

  private final Map<String, ManagedChannel> channels = new HashMap<>();
  private final Map<String, Integer> sequences = new HashMap<>(); // "producerId/epoch/partition" -> next sequence
  private final String bootstrap;
  private final String topic;
  private final String transactionalId;
  private List<Partition> partitions = List.of();

  public Example(String bootstrap, String topic, String transactionalId) {
    this.bootstrap = bootstrap;
    this.topic = topic;
    this.transactionalId = transactionalId;
  }

  private ManagedChannel channel(String address) {
    return channels.computeIfAbsent(address, a -> io.grpc.Grpc.newChannelBuilder(a, credentials()).build());
  }

  /** Plaintext, or TLS with ONCELOG_TLS_CA (and ONCELOG_TLS_CERT/ONCELOG_TLS_KEY for mTLS). */
  static io.grpc.ChannelCredentials credentials() {
    String ca = System.getenv("ONCELOG_TLS_CA");
    if (ca == null || ca.isEmpty()) return io.grpc.InsecureChannelCredentials.create();
    try {
      var tls = io.grpc.TlsChannelCredentials.newBuilder().trustManager(new java.io.File(ca));
      String cert = System.getenv("ONCELOG_TLS_CERT");
      String key = System.getenv("ONCELOG_TLS_KEY");
      if (cert != null && !cert.isEmpty() && key != null && !key.isEmpty()) {
        tls.keyManager(new java.io.File(cert), new java.io.File(key));
      }
      return tls.build();
    } catch (java.io.IOException e) {
      throw new java.io.UncheckedIOException(e);
    }
  }

  private ClusterServiceGrpc.ClusterServiceBlockingStub cluster() {
    return ClusterServiceGrpc.newBlockingStub(channel(bootstrap)).withDeadlineAfter(10, TimeUnit.SECONDS);
  }

  public List<Partition> partitions() {
    return partitions;
  }

  /** Create the topic with two partitions (or find it) and learn its leaders. */
  public void createTopic() {
    try {
      Errors.call("CreateTopics", () -> cluster().createTopics(CreateTopicsRequest.newBuilder()
          .addTopics(TopicSpec.newBuilder().setName(topic).setPartitions(2)).build()));
      log("created topic " + topic + " with 2 partitions");
    } catch (Errors.CallException e) {
      if (!e.reason().equals("TOPIC_ALREADY_EXISTS")) throw e;
      log("topic " + topic + " exists already");
    }
    var metadata = Errors.call("Metadata", () -> cluster().metadata(MetadataRequest.newBuilder().addTopics(topic).build()));
    List<Partition> found = new ArrayList<>();
    for (PartitionMetadata p : metadata.getTopics(0).getPartitionsList()) {
      found.add(new Partition(p.getPartition(), p.getLeaderAddress(), p.getLeaderEpoch()));
    }
    partitions = found;
  }

  /** The coordinator of a transactional id; for the empty id any coordinator replica will do. */
  TransactionCoordinatorServiceBlockingStub coordinator(String tid) {
    String address = null;
    if (tid.isEmpty()) {
      var described = Errors.call("DescribeCluster", () -> cluster().describeCluster(DescribeClusterRequest.getDefaultInstance()));
      for (Node n : described.getNodesList()) {
        if (n.getRole() == ServiceRole.SERVICE_ROLE_TXN_COORDINATOR) {
          address = n.getAddress();
          break;
        }
      }
      if (address == null) throw new IllegalStateException("no txn-coordinator is registered in the cluster");
    } else {
      address = Errors.call("FindCoordinator", () -> cluster().findCoordinator(FindCoordinatorRequest.newBuilder()
          .setKey(tid).setType(CoordinatorType.COORDINATOR_TYPE_TRANSACTION).build())).getAddress();
    }
    return TransactionCoordinatorServiceGrpc.newBlockingStub(channel(address));
  }

  private static <S extends io.grpc.stub.AbstractStub<S>> S deadline(S stub) {
    return stub.withDeadlineAfter(10, TimeUnit.SECONDS);
  }

  /** A producer identity: idempotent-only for the empty id, else transactional. */
  public ProducerIdentity initProducerId(String tid) {
    var coordinator = coordinator(tid);
    return Errors.call("InitProducerId", () -> deadline(coordinator).initProducerId(InitProducerIdRequest.newBuilder()
        .setTransactionalId(tid).setTransactionTimeoutMs(60_000).build())).getProducer();
  }

  /** Write one batch of values to a partition; returns the offset of its first record. */
  public long produce(int partition, ProducerIdentity producer, List<String> values, String tid) {
    Partition p = partitions.get(partition);
    String key = producer.getProducerId() + "/" + producer.getProducerEpoch() + "/" + partition;
    int baseSequence = sequences.getOrDefault(key, 0); // a new epoch starts its sequences at 0
    List<RecordBatch.Record> records = new ArrayList<>();
    for (String v : values) {
      records.add(RecordBatch.Record.of(("p" + partition).getBytes(StandardCharsets.UTF_8), v.getBytes(StandardCharsets.UTF_8)));
    }
    byte[] batch = RecordBatch.build(records, RecordBatch.Options.producer(producer.getProducerId(),
        (short) producer.getProducerEpoch(), baseSequence, !tid.isEmpty(), System.currentTimeMillis()));
    var storage = PartitionStorageServiceGrpc.newBlockingStub(channel(p.leader()));
    var response = Errors.call("Produce", () -> deadline(storage).produce(ProduceRequest.newBuilder()
        .setTransactionalId(tid)
        .setAcks(Acks.ACKS_ALL)
        .addPartitions(PartitionBatches.newBuilder()
            .setTopicPartition(TopicPartition.newBuilder().setTopic(topic).setPartition(partition))
            .setLeaderEpoch(p.leaderEpoch())
            .setRecords(com.google.protobuf.ByteString.copyFrom(batch)))
        .build()));
    PartitionProduceResult result = response.getResults(0);
    if (result.hasError()) {
      throw new IllegalStateException("produce to " + topic + "-" + partition + ": " + result.getError().getReason()
          + ": " + result.getError().getMessage());
    }
    sequences.put(key, baseSequence + values.size());
    return result.getBaseOffset();
  }

  public List<String> idempotentProduce() {
    ProducerIdentity producer = initProducerId("");
    List<String> values = List.of("idempotent-0", "idempotent-1", "idempotent-2");
    long offset = produce(0, producer, values, "");
    log("idempotent producer " + producer.getProducerId() + " epoch " + producer.getProducerEpoch() + ": wrote "
        + values.size() + " records at " + topic + "-0@" + offset);
    return values;
  }

  /** The values one transaction wrote and the producer identity to use next (EndTxn bumps the epoch, KIP-890). */
  public record TxnOutcome(List<String> values, ProducerIdentity next) {}

  public TxnOutcome transaction(ProducerIdentity producer, TransactionResult result, String label) {
    var coordinator = coordinator(transactionalId);
    var request = AddPartitionsToTxnRequest.newBuilder().setTransactionalId(transactionalId).setProducer(producer);
    for (Partition p : partitions) {
      request.addPartitions(TopicPartition.newBuilder().setTopic(topic).setPartition(p.partition()));
    }
    // CONCURRENT_TRANSACTIONS (retriable) while the previous transaction's markers are being written
    Errors.call("AddPartitionsToTxn", () -> deadline(coordinator).addPartitionsToTxn(request.build()));
    List<String> values = new ArrayList<>();
    for (Partition p : partitions) {
      List<String> batch = List.of(label + "-p" + p.partition() + "-0", label + "-p" + p.partition() + "-1");
      produce(p.partition(), producer, batch, transactionalId);
      values.addAll(batch);
    }
    var ended = Errors.call("EndTxn", () -> deadline(coordinator).endTxn(EndTxnRequest.newBuilder()
        .setTransactionalId(transactionalId).setProducer(producer).setResult(result).build()));
    log("transaction of " + transactionalId + " (producer " + producer.getProducerId() + " epoch "
        + producer.getProducerEpoch() + "): " + result.name() + " of " + values.size() + " records");
    return new TxnOutcome(values, ended.getProducer());
  }

  /** Read a partition read_committed from offset 0 until every transaction on it is decided. */
  public List<Kept> readCommitted(int partition) {
    Partition p = partitions.get(partition);
    var storage = PartitionStorageServiceGrpc.newBlockingStub(channel(p.leader()));
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    long position = 0;
    List<Kept> kept = new ArrayList<>();
    while (true) {
      long from = position;
      FetchPartitionResult result = Errors.call("Fetch", () -> deadline(storage).fetch(FetchRequest.newBuilder()
          .addPartitions(FetchPartition.newBuilder()
              .setTopicPartition(TopicPartition.newBuilder().setTopic(topic).setPartition(partition))
              .setFetchOffset(from)
              .setLeaderEpoch(p.leaderEpoch()))
          .setIsolationLevel(IsolationLevel.ISOLATION_LEVEL_READ_COMMITTED)
          .setMaxWaitMs(200)
          .build())).getResults(0);
      if (result.hasError()) {
        throw new IllegalStateException("fetch " + topic + "-" + partition + ": " + result.getError().getReason());
      }
      List<RecordBatch.Batch> batches = RecordBatch.decode(result.getRecords().toByteArray());
      List<RecordBatch.AbortedTransaction> aborted = new ArrayList<>();
      for (var t : result.getAbortedTransactionsList()) {
        aborted.add(new RecordBatch.AbortedTransaction(t.getProducerId(), t.getFirstOffset()));
      }
      for (RecordBatch.Record r : RecordBatch.readCommitted(batches, aborted, position)) {
        kept.add(new Kept(partition, r.offset(), r.valueString()));
      }
      if (!batches.isEmpty()) position = batches.get(batches.size() - 1).lastOffset() + 1;
      long lso = result.getLastStableOffset();
      // done once caught up with a stable end: nothing is undecided and nothing is left to read
      if (position >= lso && lso == result.getHighWatermark()) return kept;
      if (System.nanoTime() > deadline) {
        throw new IllegalStateException(topic + "-" + partition + ": the last stable offset did not catch up");
      }
    }
  }

  /** What run() did. */
  public record Report(String topic, Map<String, List<String>> produced, List<Kept> kept) {}

  public Report run() {
    createTopic();
    List<String> idempotent = idempotentProduce();
    ProducerIdentity producer = initProducerId(transactionalId);
    TxnOutcome committed = transaction(producer, TransactionResult.TRANSACTION_RESULT_COMMIT, "committed");
    TxnOutcome aborted = transaction(committed.next(), TransactionResult.TRANSACTION_RESULT_ABORT, "aborted");
    List<Kept> kept = new ArrayList<>();
    for (Partition p : partitions) kept.addAll(readCommitted(p.partition()));
    Map<String, List<String>> produced = new LinkedHashMap<>();
    produced.put("idempotent", idempotent);
    produced.put("committed", committed.values());
    produced.put("aborted", aborted.values());
    return new Report(topic, produced, kept);
  }

  private static void log(String line) {
    System.err.println(line);
  }

  @Override
  public void close() {
    for (ManagedChannel c : channels.values()) c.shutdownNow();
  }

  public static void main(String[] args) {
    String bootstrap = System.getenv().getOrDefault("ONCELOG_BOOTSTRAP", "");
    String topic = "java-example";
    String tid = "java-example";
    for (int i = 0; i + 1 < args.length; i += 2) {
      switch (args[i]) {
        case "--bootstrap" -> bootstrap = args[i + 1];
        case "--topic" -> topic = args[i + 1];
        case "--transactional-id" -> tid = args[i + 1];
        default -> throw new IllegalArgumentException("unknown option " + args[i]);
      }
    }
    if (bootstrap.isEmpty()) {
      System.err.println("give the address of any oncelog service: --bootstrap host:port (or ONCELOG_BOOTSTRAP)");
      System.exit(2);
    }
    try (Example example = new Example(bootstrap, topic, tid)) {
      Report report = example.run();
      System.out.println("read_committed sees " + report.kept().size() + " records:");
      for (Kept k : report.kept()) {
        System.out.println("  " + topic + "-" + k.partition() + "@" + k.offset() + " " + k.value());
      }
    }
  }
}
