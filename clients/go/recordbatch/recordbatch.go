// Package recordbatch builds and reads Kafka RecordBatch v2, the bytes oncelog stores and serves
// (DESIGN §4), and filters fetched batches the way a read_committed consumer must.
//
// Layout (big-endian), from Kafka's DefaultRecordBatch:
//
//	baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 (2) | crc uint32 |
//	attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 | maxTimestamp int64 |
//	producerId int64 | producerEpoch int16 | baseSequence int32 | recordCount int32 | records...
//
// The CRC is CRC32C (Castagnoli) over everything from attributes to the end. Each record is
//
//	length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
//	keyLength varint | key | valueLength varint | value | headerCount varint | headers...
//
// with zigzag varints (-1 length = null).
package recordbatch

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sort"
)

const (
	Magic            = 2
	HeaderBytes      = 61
	LogOverhead      = 12 // baseOffset + batchLength, not counted in batchLength
	crcOffset        = 17
	attributesOffset = 21

	CompressionNone = 0
	CompressionGzip = 1

	compressionMask   = 0x07
	transactionalMask = 0x10
	controlMask       = 0x20
)

// ControlType is the type of a transaction marker (Kafka's ControlRecordType).
type ControlType int16

const (
	ControlAbort  ControlType = 0
	ControlCommit ControlType = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC32C of b (Castagnoli), as Kafka computes it over a batch from its attributes on.
func CRC32C(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Header is one record in a Record's header list.
type Header struct {
	Key   string
	Value []byte // nil encodes as null
}

// Record is one record to encode or one decoded record. Key and Value nil mean null.
type Record struct {
	Key       []byte
	Value     []byte
	Headers   []Header
	Offset    int64 // decoded: absolute offset
	Timestamp int64 // absolute ms; 0 when encoding takes the batch timestamp
}

// Options are the batch-level fields a producer sets.
type Options struct {
	ProducerID           int64 // -1 for a plain producer
	ProducerEpoch        int16 // -1 for a plain producer
	BaseSequence         int32 // -1 for a plain producer
	Transactional        bool
	Compression          int   // CompressionNone or CompressionGzip
	BaseOffset           int64 // assigned by the partition leader; 0 when producing
	PartitionLeaderEpoch int32 // stamped by the partition leader; -1 when producing
	Timestamp            int64 // the batch's base timestamp in ms
}

// PlainOptions are the fields of a producer without a producer id, at timestamp ms.
func PlainOptions(timestamp int64) Options {
	return Options{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, PartitionLeaderEpoch: -1, Timestamp: timestamp}
}

// AppendVarint appends the zigzag varint of v, as Kafka's ByteUtils.writeVarlong.
func AppendVarint(out []byte, v int64) []byte {
	zigzag := uint64((v << 1) ^ (v >> 63))
	for zigzag >= 0x80 {
		out = append(out, byte(zigzag)|0x80)
		zigzag >>= 7
	}
	return append(out, byte(zigzag))
}

// ReadVarint reads a zigzag varint at pos; it returns the value and the next position.
func ReadVarint(b []byte, pos int) (int64, int, error) {
	var raw uint64
	for shift := uint(0); ; shift += 7 {
		if shift > 63 {
			return 0, 0, errors.New("varint longer than 10 bytes")
		}
		if pos >= len(b) {
			return 0, 0, errors.New("truncated varint")
		}
		c := b[pos]
		pos++
		raw |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			break
		}
	}
	return int64(raw>>1) ^ -int64(raw&1), pos, nil
}

func appendNullable(out []byte, data []byte) []byte {
	if data == nil {
		return AppendVarint(out, -1)
	}
	return append(AppendVarint(out, int64(len(data))), data...)
}

func encodeRecord(out []byte, offsetDelta int, timestampDelta int64, r Record) []byte {
	body := []byte{0} // record attributes (unused)
	body = AppendVarint(body, timestampDelta)
	body = AppendVarint(body, int64(offsetDelta))
	body = appendNullable(body, r.Key)
	body = appendNullable(body, r.Value)
	body = AppendVarint(body, int64(len(r.Headers)))
	for _, h := range r.Headers {
		body = appendNullable(body, []byte(h.Key))
		body = appendNullable(body, h.Value)
	}
	return append(AppendVarint(out, int64(len(body))), body...)
}

// Build encodes records as one CREATE_TIME batch, as a Kafka producer would. A record whose Timestamp
// is 0 takes opts.Timestamp.
func Build(records []Record, opts Options) ([]byte, error) {
	if len(records) == 0 {
		return nil, errors.New("a RecordBatch needs at least one record")
	}
	if opts.Transactional && opts.ProducerID < 0 {
		return nil, errors.New("a transactional batch needs a producer id")
	}
	var section []byte
	var maxTimestamp int64
	for i, r := range records {
		ts := r.Timestamp
		if ts == 0 {
			ts = opts.Timestamp
		}
		if i == 0 || ts > maxTimestamp {
			maxTimestamp = ts
		}
		section = encodeRecord(section, i, ts-opts.Timestamp, r)
	}
	attributes := int16(0)
	switch opts.Compression {
	case CompressionNone:
	case CompressionGzip:
		var buf bytes.Buffer
		w, _ := gzip.NewWriterLevel(&buf, 6)
		if _, err := w.Write(section); err != nil {
			return nil, err
		}
		if err := w.Close(); err != nil {
			return nil, err
		}
		section = buf.Bytes()
		attributes |= CompressionGzip
	default:
		return nil, fmt.Errorf("compression codec %d is not supported here (use none or gzip)", opts.Compression)
	}
	if opts.Transactional {
		attributes |= transactionalMask
	}
	return assemble(section, opts, attributes, int32(len(records)-1), maxTimestamp, opts.BaseSequence, int32(len(records))), nil
}

// BuildControl encodes a COMMIT or ABORT transaction marker (MemoryRecords.withEndTransactionMarker).
func BuildControl(t ControlType, producerID int64, producerEpoch int16, coordinatorEpoch int32, timestamp int64) []byte {
	key := binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, 0), uint16(t))
	value := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint16(nil, 0), uint32(coordinatorEpoch))
	section := encodeRecord(nil, 0, 0, Record{Key: key, Value: value})
	opts := Options{ProducerID: producerID, ProducerEpoch: producerEpoch, PartitionLeaderEpoch: -1, Timestamp: timestamp}
	return assemble(section, opts, transactionalMask|controlMask, 0, timestamp, -1, 1)
}

func assemble(section []byte, o Options, attributes int16, lastOffsetDelta int32, maxTimestamp int64,
	baseSequence int32, count int32) []byte {
	b := make([]byte, HeaderBytes, HeaderBytes+len(section))
	be := binary.BigEndian
	be.PutUint64(b[0:], uint64(o.BaseOffset))
	be.PutUint32(b[8:], uint32(HeaderBytes+len(section)-LogOverhead))
	be.PutUint32(b[12:], uint32(o.PartitionLeaderEpoch))
	b[16] = Magic
	be.PutUint16(b[21:], uint16(attributes))
	be.PutUint32(b[23:], uint32(lastOffsetDelta))
	be.PutUint64(b[27:], uint64(o.Timestamp))
	be.PutUint64(b[35:], uint64(maxTimestamp))
	be.PutUint64(b[43:], uint64(o.ProducerID))
	be.PutUint16(b[51:], uint16(o.ProducerEpoch))
	be.PutUint32(b[53:], uint32(baseSequence))
	be.PutUint32(b[57:], uint32(count))
	b = append(b, section...)
	be.PutUint32(b[crcOffset:], CRC32C(b[attributesOffset:]))
	return b
}

// WithBaseOffset returns a copy of one batch with the base offset and leader epoch a partition leader
// stamps; both lie outside the CRC, so every other byte stays as the producer wrote it.
func WithBaseOffset(batch []byte, baseOffset int64, partitionLeaderEpoch int32) []byte {
	out := append([]byte(nil), batch...)
	binary.BigEndian.PutUint64(out[0:], uint64(baseOffset))
	binary.BigEndian.PutUint32(out[12:], uint32(partitionLeaderEpoch))
	return out
}

// Batch is one decoded batch.
type Batch struct {
	BaseOffset           int64
	LastOffset           int64
	PartitionLeaderEpoch int32
	Attributes           int16
	BaseTimestamp        int64
	MaxTimestamp         int64
	ProducerID           int64
	ProducerEpoch        int16
	BaseSequence         int32
	Records              []Record
	Control              *ControlType // set on a control batch
	CoordinatorEpoch     int32        // of a control batch
}

func (b Batch) Transactional() bool { return b.Attributes&transactionalMask != 0 }
func (b Batch) IsControl() bool     { return b.Attributes&controlMask != 0 }
func (b Batch) Compression() int    { return int(b.Attributes & compressionMask) }

// Decode splits fetched bytes into batches, checking each one's magic, length and CRC32C.
func Decode(data []byte) ([]Batch, error) {
	var out []Batch
	be := binary.BigEndian
	for pos := 0; pos < len(data); {
		if len(data)-pos < HeaderBytes {
			return nil, fmt.Errorf("truncated batch header at byte %d", pos)
		}
		end := pos + LogOverhead + int(int32(be.Uint32(data[pos+8:])))
		if end > len(data) || end < pos+HeaderBytes {
			return nil, fmt.Errorf("truncated batch at byte %d", pos)
		}
		b := data[pos:end]
		if b[16] != Magic {
			return nil, fmt.Errorf("unsupported magic %d at byte %d", b[16], pos)
		}
		if CRC32C(b[attributesOffset:]) != be.Uint32(b[crcOffset:]) {
			return nil, fmt.Errorf("CRC32C mismatch in the batch at byte %d", pos)
		}
		batch := Batch{
			BaseOffset:           int64(be.Uint64(b[0:])),
			PartitionLeaderEpoch: int32(be.Uint32(b[12:])),
			Attributes:           int16(be.Uint16(b[21:])),
			BaseTimestamp:        int64(be.Uint64(b[27:])),
			MaxTimestamp:         int64(be.Uint64(b[35:])),
			ProducerID:           int64(be.Uint64(b[43:])),
			ProducerEpoch:        int16(be.Uint16(b[51:])),
			BaseSequence:         int32(be.Uint32(b[53:])),
		}
		batch.LastOffset = batch.BaseOffset + int64(int32(be.Uint32(b[23:])))
		records, err := decodeRecords(batch, b[HeaderBytes:], int(int32(be.Uint32(b[57:]))))
		if err != nil {
			return nil, fmt.Errorf("batch at byte %d: %w", pos, err)
		}
		batch.Records = records
		if batch.IsControl() {
			if len(records) != 1 || len(records[0].Key) < 4 || len(records[0].Value) < 6 {
				return nil, fmt.Errorf("malformed control record at byte %d", pos)
			}
			t := ControlType(int16(be.Uint16(records[0].Key[2:])))
			batch.Control = &t
			batch.CoordinatorEpoch = int32(be.Uint32(records[0].Value[2:]))
		}
		out = append(out, batch)
		pos = end
	}
	return out, nil
}

func readNullable(data []byte, pos int) ([]byte, int, error) {
	n, pos, err := ReadVarint(data, pos)
	if err != nil {
		return nil, 0, err
	}
	if n < 0 {
		return nil, pos, nil
	}
	if pos+int(n) > len(data) {
		return nil, 0, errors.New("record field runs past the batch")
	}
	return data[pos : pos+int(n) : pos+int(n)], pos + int(n), nil
}

func decodeRecords(batch Batch, section []byte, count int) ([]Record, error) {
	data := section
	switch batch.Compression() {
	case CompressionNone:
	case CompressionGzip:
		r, err := gzip.NewReader(bytes.NewReader(section))
		if err != nil {
			return nil, err
		}
		if data, err = io.ReadAll(r); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("compression codec %d is not supported here (use none or gzip)", batch.Compression())
	}
	records := make([]Record, 0, count)
	pos := 0
	for i := 0; i < count; i++ {
		length, p, err := ReadVarint(data, pos)
		if err != nil {
			return nil, err
		}
		end := p + int(length)
		if end > len(data) {
			return nil, errors.New("record runs past the batch")
		}
		p++ // record attributes
		tsDelta, p, err := ReadVarint(data, p)
		if err != nil {
			return nil, err
		}
		offsetDelta, p, err := ReadVarint(data, p)
		if err != nil {
			return nil, err
		}
		r := Record{Offset: batch.BaseOffset + offsetDelta, Timestamp: batch.BaseTimestamp + tsDelta}
		if r.Key, p, err = readNullable(data, p); err != nil {
			return nil, err
		}
		if r.Value, p, err = readNullable(data, p); err != nil {
			return nil, err
		}
		headers, p, err := ReadVarint(data, p)
		if err != nil {
			return nil, err
		}
		for h := int64(0); h < headers; h++ {
			var key, value []byte
			if key, p, err = readNullable(data, p); err != nil {
				return nil, err
			}
			if value, p, err = readNullable(data, p); err != nil {
				return nil, err
			}
			r.Headers = append(r.Headers, Header{Key: string(key), Value: value})
		}
		if p != end {
			return nil, errors.New("record framing does not add up")
		}
		records = append(records, r)
		pos = end
	}
	if pos != len(data) {
		return nil, errors.New("bytes left after the last record")
	}
	return records, nil
}

// AbortedTransaction is one entry of a fetch response's aborted list.
type AbortedTransaction struct {
	ProducerID  int64
	FirstOffset int64
}

// ReadCommitted returns the records a read_committed consumer keeps (Kafka's CompletedFetch): the
// transactional data of aborted transactions and every control batch are dropped, as are records
// before fetchOffset.
func ReadCommitted(batches []Batch, aborted []AbortedTransaction, fetchOffset int64) []Record {
	pending := append([]AbortedTransaction(nil), aborted...)
	sort.Slice(pending, func(i, j int) bool { return pending[i].FirstOffset < pending[j].FirstOffset })
	open := map[int64]bool{}
	var kept []Record
	for _, b := range batches {
		if b.ProducerID >= 0 {
			for len(pending) > 0 && pending[0].FirstOffset <= b.LastOffset {
				open[pending[0].ProducerID] = true
				pending = pending[1:]
			}
			if b.IsControl() {
				// an ABORT marker ends that aborted transaction; the producer's later data is new
				if b.Control != nil && *b.Control == ControlAbort {
					delete(open, b.ProducerID)
				}
				continue
			}
			if b.Transactional() && open[b.ProducerID] {
				continue
			}
		}
		if b.IsControl() {
			continue
		}
		for _, r := range b.Records {
			if r.Offset >= fetchOffset {
				kept = append(kept, r)
			}
		}
	}
	return kept
}
