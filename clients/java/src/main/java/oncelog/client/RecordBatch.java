package oncelog.client;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.zip.CRC32C;
import java.util.zip.GZIPInputStream;
import java.util.zip.GZIPOutputStream;

/**
 * Kafka RecordBatch v2, the bytes oncelog stores and serves (DESIGN §4): build a batch, decode fetched
 * batches, and filter them the way a read_committed consumer must.
 *
 * <pre>
 * baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 (2) | crc uint32 |
 * attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 | maxTimestamp int64 |
 * producerId int64 | producerEpoch int16 | baseSequence int32 | recordCount int32 | records...
 * </pre>
 *
 * The CRC is CRC32C (java.util.zip.CRC32C) over everything from attributes to the end. Each record is
 * {@code length varint | attributes int8 | timestampDelta varlong | offsetDelta varint | keyLength varint |
 * key | valueLength varint | value | headerCount varint | headers...} with zigzag varints (-1 = null).
 */
public final class RecordBatch {
  public static final byte MAGIC = 2;
  public static final int HEADER_BYTES = 61;
  public static final int LOG_OVERHEAD = 12;
  public static final int COMPRESSION_NONE = 0;
  public static final int COMPRESSION_GZIP = 1;
  public static final short CONTROL_ABORT = 0;
  public static final short CONTROL_COMMIT = 1;

  private static final int CRC_OFFSET = 17;
  private static final int ATTRIBUTES_OFFSET = 21;
  private static final int COMPRESSION_MASK = 0x07;
  private static final int TRANSACTIONAL_MASK = 0x10;
  private static final int CONTROL_MASK = 0x20;

  private RecordBatch() {}

  /** A record header; a null value encodes as null. */
  public record Header(String key, byte[] value) {}

  /** A record to encode (timestamp null takes the batch timestamp) or a decoded one (absolute offset). */
  public record Record(byte[] key, byte[] value, List<Header> headers, Long timestamp, long offset) {
    public static Record of(byte[] key, byte[] value) {
      return new Record(key, value, List.of(), null, 0);
    }

    public String valueString() {
      return value == null ? null : new String(value, StandardCharsets.UTF_8);
    }
  }

  /** The batch-level fields a producer sets. */
  public record Options(
      long producerId,
      short producerEpoch,
      int baseSequence,
      boolean transactional,
      int compression,
      long baseOffset,
      int partitionLeaderEpoch,
      long timestamp) {
    /** A producer without a producer id, at {@code timestamp} ms. */
    public static Options plain(long timestamp) {
      return new Options(-1, (short) -1, -1, false, COMPRESSION_NONE, 0, -1, timestamp);
    }

    /** An idempotent or transactional producer's batch, before the leader stamps it. */
    public static Options producer(long producerId, short epoch, int baseSequence, boolean transactional, long timestamp) {
      return new Options(producerId, epoch, baseSequence, transactional, COMPRESSION_NONE, 0, -1, timestamp);
    }
  }

  /** CRC32C of {@code b[from..]}. */
  public static int crc32c(byte[] b, int from) {
    CRC32C crc = new CRC32C();
    crc.update(b, from, b.length - from);
    return (int) crc.getValue();
  }

  static void writeVarint(ByteArrayOutputStream out, long v) {
    long zigzag = (v << 1) ^ (v >> 63);
    while ((zigzag & ~0x7FL) != 0) {
      out.write((int) ((zigzag & 0x7F) | 0x80));
      zigzag >>>= 7;
    }
    out.write((int) zigzag);
  }

  static long readVarint(ByteBuffer buf) {
    long raw = 0;
    for (int shift = 0; ; shift += 7) {
      if (shift > 63) throw new IllegalArgumentException("varint longer than 10 bytes");
      if (!buf.hasRemaining()) throw new IllegalArgumentException("truncated varint");
      byte b = buf.get();
      raw |= (long) (b & 0x7F) << shift;
      if ((b & 0x80) == 0) break;
    }
    return (raw >>> 1) ^ -(raw & 1);
  }

  private static void writeNullable(ByteArrayOutputStream out, byte[] data) {
    if (data == null) {
      writeVarint(out, -1);
    } else {
      writeVarint(out, data.length);
      out.writeBytes(data);
    }
  }

  private static void encodeRecord(ByteArrayOutputStream out, int offsetDelta, long timestampDelta, Record r) {
    ByteArrayOutputStream body = new ByteArrayOutputStream();
    body.write(0); // record attributes (unused)
    writeVarint(body, timestampDelta);
    writeVarint(body, offsetDelta);
    writeNullable(body, r.key());
    writeNullable(body, r.value());
    List<Header> headers = r.headers() == null ? List.of() : r.headers();
    writeVarint(body, headers.size());
    for (Header h : headers) {
      writeNullable(body, h.key().getBytes(StandardCharsets.UTF_8));
      writeNullable(body, h.value());
    }
    writeVarint(out, body.size());
    out.writeBytes(body.toByteArray());
  }

  /** Encode records as one CREATE_TIME batch, as a Kafka producer would. */
  public static byte[] build(List<Record> records, Options o) {
    if (records.isEmpty()) throw new IllegalArgumentException("a RecordBatch needs at least one record");
    if (o.transactional() && o.producerId() < 0) {
      throw new IllegalArgumentException("a transactional batch needs a producer id");
    }
    ByteArrayOutputStream section = new ByteArrayOutputStream();
    long maxTimestamp = 0;
    for (int i = 0; i < records.size(); i++) {
      Record r = records.get(i);
      long ts = r.timestamp() == null ? o.timestamp() : r.timestamp();
      if (i == 0 || ts > maxTimestamp) maxTimestamp = ts;
      encodeRecord(section, i, ts - o.timestamp(), r);
    }
    byte[] payload = section.toByteArray();
    short attributes = 0;
    if (o.compression() == COMPRESSION_GZIP) {
      ByteArrayOutputStream zipped = new ByteArrayOutputStream();
      try (GZIPOutputStream gz = new GZIPOutputStream(zipped)) {
        gz.write(payload);
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
      payload = zipped.toByteArray();
      attributes |= COMPRESSION_GZIP;
    } else if (o.compression() != COMPRESSION_NONE) {
      throw new IllegalArgumentException("compression codec " + o.compression() + " is not supported here");
    }
    if (o.transactional()) attributes |= TRANSACTIONAL_MASK;
    return assemble(payload, o, attributes, records.size() - 1, maxTimestamp, o.baseSequence(), records.size());
  }

  /** Encode a COMMIT or ABORT transaction marker (MemoryRecords.withEndTransactionMarker). */
  public static byte[] buildControl(
      short type, long producerId, short producerEpoch, int coordinatorEpoch, long baseOffset,
      int partitionLeaderEpoch, long timestamp) {
    byte[] key = ByteBuffer.allocate(4).putShort((short) 0).putShort(type).array();
    byte[] value = ByteBuffer.allocate(6).putShort((short) 0).putInt(coordinatorEpoch).array();
    ByteArrayOutputStream section = new ByteArrayOutputStream();
    encodeRecord(section, 0, 0, Record.of(key, value));
    Options o = new Options(producerId, producerEpoch, -1, true, COMPRESSION_NONE, baseOffset, partitionLeaderEpoch,
        timestamp);
    return assemble(section.toByteArray(), o, (short) (TRANSACTIONAL_MASK | CONTROL_MASK), 0, timestamp, -1, 1);
  }

  private static byte[] assemble(byte[] section, Options o, short attributes, int lastOffsetDelta, long maxTimestamp,
      int baseSequence, int count) {
    ByteBuffer b = ByteBuffer.allocate(HEADER_BYTES + section.length);
    b.putLong(o.baseOffset())
        .putInt(HEADER_BYTES + section.length - LOG_OVERHEAD)
        .putInt(o.partitionLeaderEpoch())
        .put(MAGIC)
        .putInt(0) // CRC, below
        .putShort(attributes)
        .putInt(lastOffsetDelta)
        .putLong(o.timestamp())
        .putLong(maxTimestamp)
        .putLong(o.producerId())
        .putShort(o.producerEpoch())
        .putInt(baseSequence)
        .putInt(count)
        .put(section);
    byte[] out = b.array();
    ByteBuffer.wrap(out).putInt(CRC_OFFSET, crc32c(out, ATTRIBUTES_OFFSET));
    return out;
  }

  /** One decoded batch. */
  public record Batch(
      long baseOffset,
      long lastOffset,
      int partitionLeaderEpoch,
      short attributes,
      long baseTimestamp,
      long maxTimestamp,
      long producerId,
      short producerEpoch,
      int baseSequence,
      List<Record> records,
      Short controlType,
      int coordinatorEpoch) {
    public boolean transactional() {
      return (attributes & TRANSACTIONAL_MASK) != 0;
    }

    public boolean isControl() {
      return (attributes & CONTROL_MASK) != 0;
    }

    public int compression() {
      return attributes & COMPRESSION_MASK;
    }
  }

  /** Split fetched bytes into batches, checking each one's magic, length and CRC32C. */
  public static List<Batch> decode(byte[] data) {
    List<Batch> out = new ArrayList<>();
    ByteBuffer all = ByteBuffer.wrap(data);
    int pos = 0;
    while (pos < data.length) {
      if (data.length - pos < HEADER_BYTES) throw new IllegalArgumentException("truncated batch header at byte " + pos);
      int end = pos + LOG_OVERHEAD + all.getInt(pos + 8);
      if (end > data.length || end < pos + HEADER_BYTES) throw new IllegalArgumentException("truncated batch at byte " + pos);
      byte[] bytes = java.util.Arrays.copyOfRange(data, pos, end);
      ByteBuffer b = ByteBuffer.wrap(bytes);
      if (b.get(16) != MAGIC) throw new IllegalArgumentException("unsupported magic " + b.get(16) + " at byte " + pos);
      if (crc32c(bytes, ATTRIBUTES_OFFSET) != b.getInt(CRC_OFFSET)) {
        throw new IllegalArgumentException("CRC32C mismatch in the batch at byte " + pos);
      }
      long baseOffset = b.getLong(0);
      short attributes = b.getShort(21);
      long baseTimestamp = b.getLong(27);
      List<Record> records = decodeRecords(baseOffset, baseTimestamp, attributes & COMPRESSION_MASK,
          java.util.Arrays.copyOfRange(bytes, HEADER_BYTES, bytes.length), b.getInt(57));
      Short control = null;
      int coordinatorEpoch = 0;
      if ((attributes & CONTROL_MASK) != 0) {
        Record marker = records.get(0);
        control = ByteBuffer.wrap(marker.key()).getShort(2);
        coordinatorEpoch = ByteBuffer.wrap(marker.value()).getInt(2);
      }
      out.add(new Batch(baseOffset, baseOffset + b.getInt(23), b.getInt(12), attributes, baseTimestamp, b.getLong(35),
          b.getLong(43), b.getShort(51), b.getInt(53), records, control, coordinatorEpoch));
      pos = end;
    }
    return out;
  }

  private static byte[] readNullable(ByteBuffer buf) {
    int n = (int) readVarint(buf);
    if (n < 0) return null;
    byte[] out = new byte[n];
    buf.get(out);
    return out;
  }

  private static List<Record> decodeRecords(long baseOffset, long baseTimestamp, int compression, byte[] section,
      int count) {
    byte[] data = section;
    if (compression == COMPRESSION_GZIP) {
      try (GZIPInputStream in = new GZIPInputStream(new ByteArrayInputStream(section))) {
        data = in.readAllBytes();
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    } else if (compression != COMPRESSION_NONE) {
      throw new IllegalArgumentException("compression codec " + compression + " is not supported here");
    }
    ByteBuffer buf = ByteBuffer.wrap(data);
    List<Record> records = new ArrayList<>(count);
    for (int i = 0; i < count; i++) {
      int length = (int) readVarint(buf);
      int end = buf.position() + length;
      buf.get(); // record attributes
      long timestampDelta = readVarint(buf);
      long offsetDelta = readVarint(buf);
      byte[] key = readNullable(buf);
      byte[] value = readNullable(buf);
      long headerCount = readVarint(buf);
      List<Header> headers = new ArrayList<>();
      for (long h = 0; h < headerCount; h++) {
        byte[] hk = readNullable(buf);
        headers.add(new Header(new String(hk, StandardCharsets.UTF_8), readNullable(buf)));
      }
      if (buf.position() != end) throw new IllegalArgumentException("record framing does not add up");
      records.add(new Record(key, value, headers, baseTimestamp + timestampDelta, baseOffset + offsetDelta));
    }
    if (buf.hasRemaining()) throw new IllegalArgumentException("bytes left after the last record");
    return records;
  }

  /** One entry of a fetch response's aborted list. */
  public record AbortedTransaction(long producerId, long firstOffset) {}

  /**
   * Records a read_committed consumer keeps (Kafka's CompletedFetch): the transactional data of aborted
   * transactions and every control batch are dropped, as are records before {@code fetchOffset}.
   */
  public static List<Record> readCommitted(List<Batch> batches, List<AbortedTransaction> abortedTransactions,
      long fetchOffset) {
    List<AbortedTransaction> pending = new ArrayList<>(abortedTransactions);
    pending.sort(Comparator.comparingLong(AbortedTransaction::firstOffset));
    Set<Long> aborted = new HashSet<>();
    List<Record> kept = new ArrayList<>();
    for (Batch batch : batches) {
      if (batch.producerId() >= 0) {
        while (!pending.isEmpty() && pending.get(0).firstOffset() <= batch.lastOffset()) {
          aborted.add(pending.remove(0).producerId());
        }
        if (batch.isControl()) {
          // an ABORT marker ends that aborted transaction; the producer's later data is new
          if (batch.controlType() != null && batch.controlType() == CONTROL_ABORT) aborted.remove(batch.producerId());
          continue;
        }
        if (batch.transactional() && aborted.contains(batch.producerId())) continue;
      }
      if (batch.isControl()) continue;
      for (Record r : batch.records()) {
        if (r.offset() >= fetchOffset) kept.add(r);
      }
    }
    return kept;
  }
}
