package oncelog.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/** The shared RecordBatch v2 vectors of testdata/record-batches: built byte for byte and decoded alike. */
class RecordBatchVectorsTest {
  static final Path DIR = Path.of(System.getProperty("oncelog.vectors", "../../testdata/record-batches"));

  static Stream<JsonObject> vectors() throws IOException {
    JsonObject manifest = JsonParser.parseString(Files.readString(DIR.resolve("vectors.json"))).getAsJsonObject();
    List<JsonObject> out = new ArrayList<>();
    for (JsonElement v : manifest.getAsJsonArray("vectors")) out.add(v.getAsJsonObject());
    return out.stream();
  }

  static byte[] hex(JsonElement e) {
    return e.isJsonNull() ? null : HexFormat.of().parseHex(e.getAsString());
  }

  static List<RecordBatch.Record> records(JsonArray spec) {
    List<RecordBatch.Record> out = new ArrayList<>();
    for (JsonElement e : spec) {
      JsonObject r = e.getAsJsonObject();
      List<RecordBatch.Header> headers = new ArrayList<>();
      for (JsonElement h : r.getAsJsonArray("headers")) {
        headers.add(new RecordBatch.Header(h.getAsJsonArray().get(0).getAsString(), hex(h.getAsJsonArray().get(1))));
      }
      out.add(new RecordBatch.Record(hex(r.get("key")), hex(r.get("value")), headers, r.get("timestamp").getAsLong(), 0));
    }
    return out;
  }

  static byte[] encode(JsonObject vector) {
    if (vector.get("kind").getAsString().equals("control")) {
      JsonObject c = vector.getAsJsonObject("control");
      short type = c.get("type").getAsString().equals("COMMIT") ? RecordBatch.CONTROL_COMMIT : RecordBatch.CONTROL_ABORT;
      return RecordBatch.buildControl(type, c.get("producer_id").getAsLong(), c.get("producer_epoch").getAsShort(),
          c.get("coordinator_epoch").getAsInt(), c.get("base_offset").getAsLong(),
          c.get("partition_leader_epoch").getAsInt(), c.get("timestamp").getAsLong());
    }
    JsonObject b = vector.getAsJsonObject("batch");
    int compression = b.get("compression").getAsString().equals("gzip") ? RecordBatch.COMPRESSION_GZIP : RecordBatch.COMPRESSION_NONE;
    return RecordBatch.build(records(vector.getAsJsonArray("records")), new RecordBatch.Options(
        b.get("producer_id").getAsLong(), b.get("producer_epoch").getAsShort(), b.get("base_sequence").getAsInt(),
        b.get("transactional").getAsBoolean(), compression, b.get("base_offset").getAsLong(),
        b.get("partition_leader_epoch").getAsInt(), b.get("base_timestamp").getAsLong()));
  }

  static void assertSameRecords(JsonObject vector, List<RecordBatch.Record> decoded) {
    List<RecordBatch.Record> want = records(vector.getAsJsonArray("records"));
    assertEquals(want.size(), decoded.size());
    for (int i = 0; i < want.size(); i++) {
      assertArrayEquals(want.get(i).key(), decoded.get(i).key(), "key of record " + i);
      assertArrayEquals(want.get(i).value(), decoded.get(i).value(), "value of record " + i);
      assertEquals(want.get(i).timestamp(), decoded.get(i).timestamp(), "timestamp of record " + i);
      assertEquals(want.get(i).headers().size(), decoded.get(i).headers().size());
      for (int h = 0; h < want.get(i).headers().size(); h++) {
        assertEquals(want.get(i).headers().get(h).key(), decoded.get(i).headers().get(h).key());
        assertArrayEquals(want.get(i).headers().get(h).value(), decoded.get(i).headers().get(h).value());
      }
    }
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("vectors")
  void encodesAndDecodesEveryVector(JsonObject vector) throws IOException {
    String name = vector.get("name").getAsString();
    byte[] expected = Files.readAllBytes(DIR.resolve(name + ".bin"));
    byte[] built = encode(vector);
    if (vector.get("byte_exact").getAsBoolean()) {
      assertEquals(HexFormat.of().formatHex(expected), HexFormat.of().formatHex(built), name + ": bytes differ");
    }
    List<RecordBatch.Batch> decoded = RecordBatch.decode(expected);
    assertEquals(1, decoded.size());
    RecordBatch.Batch batch = decoded.get(0);
    if (vector.get("kind").getAsString().equals("control")) {
      JsonObject c = vector.getAsJsonObject("control");
      assertTrue(batch.isControl() && batch.transactional());
      assertEquals(c.get("type").getAsString().equals("COMMIT") ? RecordBatch.CONTROL_COMMIT : RecordBatch.CONTROL_ABORT,
          (short) batch.controlType());
      assertEquals(c.get("coordinator_epoch").getAsInt(), batch.coordinatorEpoch());
      assertEquals(c.get("producer_id").getAsLong(), batch.producerId());
      return;
    }
    JsonObject b = vector.getAsJsonObject("batch");
    assertEquals(b.get("producer_id").getAsLong(), batch.producerId());
    assertEquals(b.get("base_sequence").getAsInt(), batch.baseSequence());
    assertEquals(b.get("base_offset").getAsLong(), batch.baseOffset());
    assertEquals(b.get("transactional").getAsBoolean(), batch.transactional());
    assertSameRecords(vector, batch.records());
    // this encoder's own batch (its own gzip for the compressed vector) decodes to the same records
    assertSameRecords(vector, RecordBatch.decode(built).get(0).records());
  }

  @Test
  void crc32cCheckValue() {
    assertEquals(0xE3069283, RecordBatch.crc32c("123456789".getBytes(StandardCharsets.US_ASCII), 0));
  }

  @Test
  void aDamagedVectorFailsItsCrc() throws IOException {
    byte[] bytes = Files.readAllBytes(DIR.resolve("transactional.bin"));
    bytes[bytes.length - 1] ^= 1;
    assertThrows(IllegalArgumentException.class, () -> RecordBatch.decode(bytes));
  }

  @Test
  void readCommittedDropsAbortedDataAndMarkers() throws IOException {
    long pid = 7;
    byte[] committed = RecordBatch.build(List.of(RecordBatch.Record.of(null, "c".getBytes(StandardCharsets.UTF_8))),
        new RecordBatch.Options(pid, (short) 0, 0, true, 0, 0, -1, 1));
    byte[] commit = RecordBatch.buildControl(RecordBatch.CONTROL_COMMIT, pid, (short) 0, 0, 1, -1, 1);
    byte[] aborted = RecordBatch.build(List.of(RecordBatch.Record.of(null, "a".getBytes(StandardCharsets.UTF_8))),
        new RecordBatch.Options(pid, (short) 1, 0, true, 0, 2, -1, 1));
    byte[] abort = RecordBatch.buildControl(RecordBatch.CONTROL_ABORT, pid, (short) 1, 0, 3, -1, 1);
    var all = new java.io.ByteArrayOutputStream();
    for (byte[] b : List.of(committed, commit, aborted, abort)) all.writeBytes(b);
    var kept = RecordBatch.readCommitted(RecordBatch.decode(all.toByteArray()),
        List.of(new RecordBatch.AbortedTransaction(pid, 2)), 0);
    assertEquals(List.of("c"), kept.stream().map(RecordBatch.Record::valueString).toList());
    assertFalse(RecordBatch.readCommitted(RecordBatch.decode(all.toByteArray()), List.of(), 0).isEmpty());
  }
}
