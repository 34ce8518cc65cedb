package oncelog.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import com.google.protobuf.Any;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.util.ArrayList;
import java.util.List;
import oncelog.api.common.v1.Errors.ErrorInfo;
import oncelog.api.common.v1.Errors.ErrorReason;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/**
 * The example against a running cluster: tests/integration/test_java_client.py starts a LocalCluster and
 * passes its address in ONCELOG_BOOTSTRAP (without it the cluster tests are skipped, and that Python test
 * fails on a skip).
 */
class ExampleTest {
  static String bootstrap() {
    String address = System.getenv("ONCELOG_BOOTSTRAP");
    Assumptions.assumeTrue(address != null && !address.isEmpty(), "ONCELOG_BOOTSTRAP is not set");
    return address;
  }

  @Test
  void readCommittedSeesExactlyTheCommittedRecords() {
    String topic = "java-test-" + System.nanoTime();
    try (Example example = new Example(bootstrap(), topic, topic + "-txn")) {
      Example.Report report = example.run();
      List<String> seen = new ArrayList<>(report.kept().stream().map(Example.Kept::value).toList());
      List<String> want = new ArrayList<>(report.produced().get("idempotent"));
      want.addAll(report.produced().get("committed"));
      seen.sort(null);
      want.sort(null);
      assertEquals(want, seen, "read_committed keeps exactly the idempotent and committed records");
      assertEquals(4, report.produced().get("aborted").size());
    }
  }

  @Test
  void aFatalErrorCarriesItsErrorInfoAndIsNotRetried() {
    io.grpc.ManagedChannel channel = io.grpc.ManagedChannelBuilder.forTarget(bootstrap()).usePlaintext().build();
    try {
      var cluster = oncelog.api.cluster.v1.ClusterServiceGrpc.newBlockingStub(channel);
      var request = oncelog.api.cluster.v1.ClusterServiceOuterClass.CreateTopicsRequest.newBuilder()
          .addTopics(oncelog.api.cluster.v1.ClusterServiceOuterClass.TopicSpec.newBuilder()
              .setName("java-bad/name").setPartitions(1))
          .build();
      int[] attempts = {0};
      Errors.CallException e = assertThrows(Errors.CallException.class, () -> Errors.call("CreateTopics", () -> {
        attempts[0]++;
        return cluster.withDeadlineAfter(30, java.util.concurrent.TimeUnit.SECONDS).createTopics(request);
      }));
      ErrorInfo info = Errors.info(e.getCause());
      assertNotNull(info, "the grpc-status-details-bin trailer holds an ErrorInfo");
      assertEquals(ErrorReason.ERROR_REASON_INVALID_TOPIC, info.getReason());
      assertFalse(info.getRetriable());
      assertEquals("INVALID_TOPIC", e.reason());
      assertEquals(1, attempts[0], "a fatal error is not retried");
    } finally {
      channel.shutdownNow();
    }
  }

  @Test
  void retriableFollowsTheErrorInfoElseOnlyUnavailable() {
    com.google.rpc.Status busy = com.google.rpc.Status.newBuilder().setCode(Status.Code.ABORTED.value())
        .addDetails(Any.pack(ErrorInfo.newBuilder()
            .setReason(ErrorReason.ERROR_REASON_CONCURRENT_TRANSACTIONS).setRetriable(true).build()))
        .build();
    com.google.rpc.Status fenced = com.google.rpc.Status.newBuilder().setCode(Status.Code.UNAVAILABLE.value())
        .addDetails(Any.pack(ErrorInfo.newBuilder().setReason(ErrorReason.ERROR_REASON_PRODUCER_FENCED).build()))
        .build();
    assertEquals(true, Errors.retriable(StatusProto.toStatusRuntimeException(busy)));
    assertEquals(false, Errors.retriable(StatusProto.toStatusRuntimeException(fenced)));
    assertEquals(true, Errors.retriable(new StatusRuntimeException(Status.UNAVAILABLE)));
    assertEquals(false, Errors.retriable(new StatusRuntimeException(Status.INVALID_ARGUMENT)));
    assertEquals("CONCURRENT_TRANSACTIONS", Errors.reason(StatusProto.toStatusRuntimeException(busy)));
  }
}
