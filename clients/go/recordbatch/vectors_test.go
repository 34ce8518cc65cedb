package recordbatch

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// The shared RecordBatch v2 vectors of testdata/record-batches (written by
// scripts/gen_record_batch_vectors.py): every encoder builds the same bytes and every decoder reads
// the same records.

type vectorRecord struct {
	Key       *string     `json:"key"`
	Value     *string     `json:"value"`
	Timestamp int64       `json:"timestamp"`
	Headers   [][]*string `json:"headers"`
}

type vector struct {
	Name      string `json:"name"`
	Kind      string `json:"kind"`
	ByteExact bool   `json:"byte_exact"`
	Batch     struct {
		ProducerID           int64  `json:"producer_id"`
		ProducerEpoch        int16  `json:"producer_epoch"`
		BaseSequence         int32  `json:"base_sequence"`
		Transactional        bool   `json:"transactional"`
		BaseOffset           int64  `json:"base_offset"`
		PartitionLeaderEpoch int32  `json:"partition_leader_epoch"`
		Compression          string `json:"compression"`
		BaseTimestamp        int64  `json:"base_timestamp"`
	} `json:"batch"`
	Control struct {
		Type                 string `json:"type"`
		ProducerID           int64  `json:"producer_id"`
		ProducerEpoch        int16  `json:"producer_epoch"`
		CoordinatorEpoch     int32  `json:"coordinator_epoch"`
		BaseOffset           int64  `json:"base_offset"`
		PartitionLeaderEpoch int32  `json:"partition_leader_epoch"`
		Timestamp            int64  `json:"timestamp"`
	} `json:"control"`
	Records []vectorRecord `json:"records"`
}

func vectorDir() string {
	if dir := os.Getenv("ONCELOG_VECTOR_DIR"); dir != "" {
		return dir
	}
	return filepath.Join("..", "..", "..", "testdata", "record-batches")
}

func unhex(t *testing.T, s *string) []byte {
	if s == nil {
		return nil
	}
	b, err := hex.DecodeString(*s)
	if err != nil {
		t.Fatal(err)
	}
	if b == nil {
		b = []byte{}
	}
	return b
}

func (v vector) records(t *testing.T) []Record {
	out := make([]Record, len(v.Records))
	for i, r := range v.Records {
		out[i] = Record{Key: unhex(t, r.Key), Value: unhex(t, r.Value), Timestamp: r.Timestamp}
		for _, h := range r.Headers {
			out[i].Headers = append(out[i].Headers, Header{Key: *h[0], Value: unhex(t, h[1])})
		}
	}
	return out
}

func (v vector) encode(t *testing.T) []byte {
	if v.Kind == "control" {
		c := v.Control
		typ := ControlAbort
		if c.Type == "COMMIT" {
			typ = ControlCommit
		}
		b := BuildControl(typ, c.ProducerID, c.ProducerEpoch, c.CoordinatorEpoch, c.Timestamp)
		// the leader's fields lie outside the CRC: stamp them as the partition leader does
		return WithBaseOffset(b, c.BaseOffset, c.PartitionLeaderEpoch)
	}
	b := v.Batch
	compression := CompressionNone
	if b.Compression == "gzip" {
		compression = CompressionGzip
	}
	out, err := Build(v.records(t), Options{
		ProducerID: b.ProducerID, ProducerEpoch: b.ProducerEpoch, BaseSequence: b.BaseSequence,
		Transactional: b.Transactional, Compression: compression, BaseOffset: b.BaseOffset,
		PartitionLeaderEpoch: b.PartitionLeaderEpoch, Timestamp: b.BaseTimestamp,
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameRecords(t *testing.T, want, got []Record) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("%d records, want %d", len(got), len(want))
	}
	for i := range want {
		w, g := want[i], got[i]
		if !bytes.Equal(w.Key, g.Key) || (w.Key == nil) != (g.Key == nil) {
			t.Errorf("record %d key %q, want %q", i, g.Key, w.Key)
		}
		if !bytes.Equal(w.Value, g.Value) || (w.Value == nil) != (g.Value == nil) {
			t.Errorf("record %d value %q, want %q", i, g.Value, w.Value)
		}
		if w.Timestamp != g.Timestamp {
			t.Errorf("record %d timestamp %d, want %d", i, g.Timestamp, w.Timestamp)
		}
		if len(w.Headers) != len(g.Headers) {
			t.Fatalf("record %d has %d headers, want %d", i, len(g.Headers), len(w.Headers))
		}
		for h := range w.Headers {
			if w.Headers[h].Key != g.Headers[h].Key || !bytes.Equal(w.Headers[h].Value, g.Headers[h].Value) ||
				(w.Headers[h].Value == nil) != (g.Headers[h].Value == nil) {
				t.Errorf("record %d header %d is %v, want %v", i, h, g.Headers[h], w.Headers[h])
			}
		}
	}
}

func TestSharedVectors(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(vectorDir(), "vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var manifest struct {
		Vectors []vector `json:"vectors"`
	}
	if err := json.Unmarshal(raw, &manifest); err != nil {
		t.Fatal(err)
	}
	if len(manifest.Vectors) < 6 {
		t.Fatalf("only %d vectors", len(manifest.Vectors))
	}
	for _, v := range manifest.Vectors {
		t.Run(v.Name, func(t *testing.T) {
			expected, err := os.ReadFile(filepath.Join(vectorDir(), v.Name+".bin"))
			if err != nil {
				t.Fatal(err)
			}
			built := v.encode(t)
			if v.ByteExact && !bytes.Equal(built, expected) {
				t.Fatalf("built\n%x\nwant\n%x", built, expected)
			}
			batches, err := Decode(expected)
			if err != nil || len(batches) != 1 {
				t.Fatalf("decode: %v (%d batches)", err, len(batches))
			}
			b := batches[0]
			if v.Kind == "control" {
				want := ControlAbort
				if v.Control.Type == "COMMIT" {
					want = ControlCommit
				}
				if !b.IsControl() || !b.Transactional() || b.Control == nil || *b.Control != want ||
					b.CoordinatorEpoch != v.Control.CoordinatorEpoch || b.ProducerID != v.Control.ProducerID {
					t.Fatalf("control batch decoded as %+v", b)
				}
				return
			}
			if b.ProducerID != v.Batch.ProducerID || b.BaseSequence != v.Batch.BaseSequence ||
				b.BaseOffset != v.Batch.BaseOffset || b.Transactional() != v.Batch.Transactional {
				t.Fatalf("header decoded as %+v", b)
			}
			sameRecords(t, v.records(t), b.Records)
			// this encoder's own batch (its own gzip for the compressed vector) decodes to the same records
			own, err := Decode(built)
			if err != nil {
				t.Fatal(err)
			}
			sameRecords(t, v.records(t), own[0].Records)
		})
	}
}

func TestCRC32CCheckValue(t *testing.T) {
	if got := CRC32C([]byte("123456789")); got != 0xe3069283 {
		t.Fatalf("CRC32C = %#x", got)
	}
}

func TestDamagedBatchFailsItsCRC(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(vectorDir(), "transactional.bin"))
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 1
	if _, err := Decode(b); err == nil {
		t.Fatal("a flipped bit went unnoticed")
	}
}

func TestReadCommittedDropsAbortedDataAndMarkers(t *testing.T) {
	const pid = 7
	committed, _ := Build([]Record{{Value: []byte("c")}}, Options{ProducerID: pid, ProducerEpoch: 0, BaseSequence: 0, Transactional: true, PartitionLeaderEpoch: -1, Timestamp: 1})
	commit := WithBaseOffset(BuildControl(ControlCommit, pid, 0, 0, 1), 1, -1)
	aborted, _ := Build([]Record{{Value: []byte("a")}}, Options{ProducerID: pid, ProducerEpoch: 1, BaseSequence: 0, Transactional: true, BaseOffset: 2, PartitionLeaderEpoch: -1, Timestamp: 1})
	abort := WithBaseOffset(BuildControl(ControlAbort, pid, 1, 0, 1), 3, -1)
	batches, err := Decode(bytes.Join([][]byte{committed, commit, aborted, abort}, nil))
	if err != nil {
		t.Fatal(err)
	}
	kept := ReadCommitted(batches, []AbortedTransaction{{ProducerID: pid, FirstOffset: 2}}, 0)
	if len(kept) != 1 || string(kept[0].Value) != "c" {
		t.Fatalf("kept %v", kept)
	}
	if all := ReadCommitted(batches, nil, 0); len(all) != 2 {
		t.Fatalf("without an aborted list both data records stay, got %v", all)
	}
}
