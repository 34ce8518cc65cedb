package oncelog.client;

import com.google.protobuf.Any;
import com.google.protobuf.InvalidProtocolBufferException;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.util.concurrent.Callable;
import oncelog.api.common.v1.Errors.ErrorInfo;

/**
 * Reading the {@code oncelog.api.common.v1.ErrorInfo} that every failed oncelog call carries in its
 * {@code grpc-status-details-bin} trailer (a {@code google.rpc.Status}), and deciding from it whether the
 * same request may be sent again.
 */
public final class Errors {
  private Errors() {}

  /** The ErrorInfo of a failed call, or null when the server sent none. */
  public static ErrorInfo info(Throwable error) {
    com.google.rpc.Status status = StatusProto.fromThrowable(error);
    if (status == null) return null;
    for (Any detail : status.getDetailsList()) {
      if (detail.is(ErrorInfo.class)) {
        try {
          return detail.unpack(ErrorInfo.class);
        } catch (InvalidProtocolBufferException e) {
          return null;
        }
      }
    }
    return null;
  }

  /** The reason without its ERROR_REASON_ prefix, or the gRPC code when there is no ErrorInfo. */
  public static String reason(Throwable error) {
    ErrorInfo info = info(error);
    if (info != null) return info.getReason().name().replaceFirst("^ERROR_REASON_", "");
    return Status.fromThrowable(error).getCode().name();
  }

  /**
   * Whether sending the same request again may succeed: the server's ErrorInfo decides; without one, only
   * UNAVAILABLE (the call never reached a server) is worth another try.
   */
  public static boolean retriable(Throwable error) {
    ErrorInfo info = info(error);
    if (info != null) return info.getRetriable();
    return Status.fromThrowable(error).getCode() == Status.Code.UNAVAILABLE;
  }

  /** A call that failed for good: fatal, or retriable but out of attempts. */
  public static final class CallException extends RuntimeException {
    private final String reason;

    CallException(String method, StatusRuntimeException cause) {
      super(method + ": " + Errors.reason(cause) + ": " + message(cause), cause);
      this.reason = Errors.reason(cause);
    }

    public String reason() {
      return reason;
    }

    private static String message(StatusRuntimeException e) {
      ErrorInfo info = info(e);
      return info != null ? info.getMessage() : e.getStatus().getDescription();
    }
  }

  /** Run {@code call}, retrying it with backoff while the failure is retriable. */
  public static <T> T call(String method, Callable<T> call) {
    for (int attempt = 1; ; attempt++) {
      try {
        return call.call();
      } catch (StatusRuntimeException e) {
        if (!retriable(e) || attempt >= 50) throw new CallException(method, e);
        try {
          Thread.sleep(Math.min(20L << Math.min(attempt, 5), 500));
        } catch (InterruptedException interrupted) {
          Thread.currentThread().interrupt();
          throw new CallException(method, e);
        }
      } catch (RuntimeException e) {
        throw e;
      } catch (Exception e) {
        throw new IllegalStateException(e);
      }
    }
  }
}
