package oncelog

import (
	"context"
	"fmt"
	"strings"
	"time"

	clusterv1 "oncelog/clients/go/gen/oncelog/api/cluster/v1"
	commonv1 "oncelog/clients/go/gen/oncelog/api/common/v1"
	storagev1 "oncelog/clients/go/gen/oncelog/api/storage/v1"
	txnv1 "oncelog/clients/go/gen/oncelog/api/txn/v1"
	"oncelog/clients/go/recordbatch"
)

// Partition is where a partition lives, from ClusterService.Metadata.
type Partition struct {
	Partition   int32
	Leader      string
	LeaderEpoch int32
}

// Kept is one record a read_committed reader keeps.
type Kept struct {
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Value     string `json:"value"`
}

// Example walks the API: a topic, an idempotent produce, a committed and an aborted transaction, and a
// read_committed fetch.
type Example struct {
	Conns           Conns
	Bootstrap       string
	Topic           string
	TransactionalID string
	Log             func(format string, args ...any)

	Partitions []Partition
	sequences  map[string]int32 // "producerId/epoch/partition" -> next sequence
}

func (e *Example) cluster() (clusterv1.ClusterServiceClient, error) {
	conn, err := e.Conns.Get(e.Bootstrap)
	if err != nil {
		return nil, err
	}
	return clusterv1.NewClusterServiceClient(conn), nil
}

// CreateTopic creates the topic with two partitions (or finds it) and learns its leaders.
func (e *Example) CreateTopic(ctx context.Context) error {
	cluster, err := e.cluster()
	if err != nil {
		return err
	}
	_, err = Call(ctx, "CreateTopics", func(ctx context.Context) (*clusterv1.CreateTopicsResponse, error) {
		return cluster.CreateTopics(ctx, &clusterv1.CreateTopicsRequest{
			Topics: []*clusterv1.TopicSpec{{Name: e.Topic, Partitions: 2}},
		})
	})
	switch {
	case err == nil:
		e.Log("created topic %s with 2 partitions", e.Topic)
	case IsReason(err, "TOPIC_ALREADY_EXISTS"):
		e.Log("topic %s exists already", e.Topic)
	default:
		return err
	}
	metadata, err := Call(ctx, "Metadata", func(ctx context.Context) (*clusterv1.MetadataResponse, error) {
		return cluster.Metadata(ctx, &clusterv1.MetadataRequest{Topics: []string{e.Topic}})
	})
	if err != nil {
		return err
	}
	e.Partitions = nil
	for _, p := range metadata.GetTopics()[0].GetPartitions() {
		e.Partitions = append(e.Partitions, Partition{p.GetPartition(), p.GetLeaderAddress(), p.GetLeaderEpoch()})
	}
	return nil
}

// Coordinator finds the transaction coordinator of a transactional id; for the empty id (an
// idempotent-only producer) any coordinator replica will do.
func (e *Example) Coordinator(ctx context.Context, transactionalID string) (txnv1.TransactionCoordinatorServiceClient, error) {
	cluster, err := e.cluster()
	if err != nil {
		return nil, err
	}
	address := ""
	if transactionalID == "" {
		described, err := Call(ctx, "DescribeCluster", func(ctx context.Context) (*clusterv1.DescribeClusterResponse, error) {
			return cluster.DescribeCluster(ctx, &clusterv1.DescribeClusterRequest{})
		})
		if err != nil {
			return nil, err
		}
		for _, n := range described.GetNodes() {
			if n.GetRole() == clusterv1.ServiceRole_SERVICE_ROLE_TXN_COORDINATOR {
				address = n.GetAddress()
				break
			}
		}
		if address == "" {
			return nil, fmt.Errorf("no txn-coordinator is registered in the cluster")
		}
	} else {
		found, err := Call(ctx, "FindCoordinator", func(ctx context.Context) (*clusterv1.FindCoordinatorResponse, error) {
			return cluster.FindCoordinator(ctx, &clusterv1.FindCoordinatorRequest{
				Key: transactionalID, Type: clusterv1.CoordinatorType_COORDINATOR_TYPE_TRANSACTION,
			})
		})
		if err != nil {
			return nil, err
		}
		address = found.GetAddress()
	}
	conn, err := e.Conns.Get(address)
	if err != nil {
		return nil, err
	}
	return txnv1.NewTransactionCoordinatorServiceClient(conn), nil
}

// InitProducerID gets a producer identity: idempotent-only for the empty id, else transactional.
func (e *Example) InitProducerID(ctx context.Context, transactionalID string) (*commonv1.ProducerIdentity, error) {
	coordinator, err := e.Coordinator(ctx, transactionalID)
	if err != nil {
		return nil, err
	}
	response, err := Call(ctx, "InitProducerId", func(ctx context.Context) (*txnv1.InitProducerIdResponse, error) {
		return coordinator.InitProducerId(ctx, &txnv1.InitProducerIdRequest{
			TransactionalId: transactionalID, TransactionTimeoutMs: 60_000,
		})
	})
	if err != nil {
		return nil, err
	}
	return response.GetProducer(), nil
}

// Produce writes one batch of values to a partition and returns the offset of its first record.
func (e *Example) Produce(ctx context.Context, partition int32, producer *commonv1.ProducerIdentity, values []string,
	transactionalID string) (int64, error) {
	p := e.Partitions[partition]
	key := fmt.Sprintf("%d/%d/%d", producer.GetProducerId(), producer.GetProducerEpoch(), partition)
	if e.sequences == nil {
		e.sequences = map[string]int32{}
	}
	baseSequence := e.sequences[key] // a new epoch starts its sequences at 0
	records := make([]recordbatch.Record, len(values))
	for i, v := range values {
		records[i] = recordbatch.Record{Key: []byte(fmt.Sprintf("p%d", partition)), Value: []byte(v)}
	}
	batch, err := recordbatch.Build(records, recordbatch.Options{
		ProducerID:           producer.GetProducerId(),
		ProducerEpoch:        int16(producer.GetProducerEpoch()),
		BaseSequence:         baseSequence,
		Transactional:        transactionalID != "",
		PartitionLeaderEpoch: -1,
		Timestamp:            time.Now().UnixMilli(),
	})
	if err != nil {
		return 0, err
	}
	conn, err := e.Conns.Get(p.Leader)
	if err != nil {
		return 0, err
	}
	storage := storagev1.NewPartitionStorageServiceClient(conn)
	response, err := Call(ctx, "Produce", func(ctx context.Context) (*storagev1.ProduceResponse, error) {
		return storage.Produce(ctx, &storagev1.ProduceRequest{
			TransactionalId: transactionalID,
			Acks:            storagev1.Acks_ACKS_ALL,
			Partitions: []*storagev1.PartitionBatches{{
				TopicPartition: &commonv1.TopicPartition{Topic: e.Topic, Partition: partition},
				LeaderEpoch:    p.LeaderEpoch,
				Records:        batch,
			}},
		})
	})
	if err != nil {
		return 0, err
	}
	result := response.GetResults()[0]
	if result.GetError() != nil {
		return 0, fmt.Errorf("produce to %s-%d: %s: %s", e.Topic, partition, result.GetError().GetReason(), result.GetError().GetMessage())
	}
	e.sequences[key] = baseSequence + int32(len(values))
	return result.GetBaseOffset(), nil
}

// IdempotentProduce writes three records with an idempotent (non-transactional) producer.
func (e *Example) IdempotentProduce(ctx context.Context) ([]string, error) {
	producer, err := e.InitProducerID(ctx, "")
	if err != nil {
		return nil, err
	}
	values := []string{"idempotent-0", "idempotent-1", "idempotent-2"}
	offset, err := e.Produce(ctx, 0, producer, values, "")
	if err != nil {
		return nil, err
	}
	e.Log("idempotent producer %d epoch %d: wrote %d records at %s-0@%d",
		producer.GetProducerId(), producer.GetProducerEpoch(), len(values), e.Topic, offset)
	return values, nil
}

// Transaction runs one transaction over every partition and ends it with result; it returns the values
// written and the producer identity to use next (the epoch is bumped on every EndTxn, KIP-890).
func (e *Example) Transaction(ctx context.Context, producer *commonv1.ProducerIdentity, result commonv1.TransactionResult,
	label string) ([]string, *commonv1.ProducerIdentity, error) {
	tid := e.TransactionalID
	coordinator, err := e.Coordinator(ctx, tid)
	if err != nil {
		return nil, nil, err
	}
	var partitions []*commonv1.TopicPartition
	for _, p := range e.Partitions {
		partitions = append(partitions, &commonv1.TopicPartition{Topic: e.Topic, Partition: p.Partition})
	}
	// CONCURRENT_TRANSACTIONS (retriable) while the previous transaction's markers are being written
	if _, err := Call(ctx, "AddPartitionsToTxn", func(ctx context.Context) (*txnv1.AddPartitionsToTxnResponse, error) {
		return coordinator.AddPartitionsToTxn(ctx, &txnv1.AddPartitionsToTxnRequest{
			TransactionalId: tid, Producer: producer, Partitions: partitions,
		})
	}); err != nil {
		return nil, nil, err
	}
	var values []string
	for _, p := range e.Partitions {
		batch := []string{fmt.Sprintf("%s-p%d-0", label, p.Partition), fmt.Sprintf("%s-p%d-1", label, p.Partition)}
		if _, err := e.Produce(ctx, p.Partition, producer, batch, tid); err != nil {
			return nil, nil, err
		}
		values = append(values, batch...)
	}
	ended, err := Call(ctx, "EndTxn", func(ctx context.Context) (*txnv1.EndTxnResponse, error) {
		return coordinator.EndTxn(ctx, &txnv1.EndTxnRequest{TransactionalId: tid, Producer: producer, Result: result})
	})
	if err != nil {
		return nil, nil, err
	}
	e.Log("transaction of %s (producer %d epoch %d): %s of %d records", tid, producer.GetProducerId(),
		producer.GetProducerEpoch(), strings.ToLower(strings.TrimPrefix(result.String(), "TRANSACTION_RESULT_")), len(values))
	return values, ended.GetProducer(), nil
}

// ReadCommitted reads a partition read_committed from offset 0 until every transaction on it is decided.
func (e *Example) ReadCommitted(ctx context.Context, partition int32) ([]Kept, error) {
	p := e.Partitions[partition]
	conn, err := e.Conns.Get(p.Leader)
	if err != nil {
		return nil, err
	}
	storage := storagev1.NewPartitionStorageServiceClient(conn)
	deadline := time.Now().Add(30 * time.Second)
	var position int64
	var kept []Kept
	for {
		response, err := Call(ctx, "Fetch", func(ctx context.Context) (*storagev1.FetchResponse, error) {
			return storage.Fetch(ctx, &storagev1.FetchRequest{
				Partitions: []*storagev1.FetchPartition{{
					TopicPartition: &commonv1.TopicPartition{Topic: e.Topic, Partition: partition},
					FetchOffset:    position,
					LeaderEpoch:    p.LeaderEpoch,
				}},
				IsolationLevel: storagev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED,
				MaxWaitMs:      200,
			})
		})
		if err != nil {
			return nil, err
		}
		result := response.GetResults()[0]
		if result.GetError() != nil {
			return nil, fmt.Errorf("fetch %s-%d: %s: %s", e.Topic, partition, result.GetError().GetReason(), result.GetError().GetMessage())
		}
		batches, err := recordbatch.Decode(result.GetRecords())
		if err != nil {
			return nil, err
		}
		var aborted []recordbatch.AbortedTransaction
		for _, t := range result.GetAbortedTransactions() {
			aborted = append(aborted, recordbatch.AbortedTransaction{ProducerID: t.GetProducerId(), FirstOffset: t.GetFirstOffset()})
		}
		for _, r := range recordbatch.ReadCommitted(batches, aborted, position) {
			kept = append(kept, Kept{Partition: partition, Offset: r.Offset, Value: string(r.Value)})
		}
		if len(batches) > 0 {
			position = batches[len(batches)-1].LastOffset + 1
		}
		lso := result.GetLastStableOffset()
		// done once caught up with a stable end: nothing is undecided and nothing is left to read
		if position >= lso && lso == result.GetHighWatermark() {
			return kept, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s-%d: the last stable offset did not catch up", e.Topic, partition)
		}
	}
}

// Report is what Run did, for --json.
type Report struct {
	Topic    string              `json:"topic"`
	Produced map[string][]string `json:"produced"`
	Kept     []Kept              `json:"kept"`
}

// Run does the whole example.
func (e *Example) Run(ctx context.Context) (*Report, error) {
	if e.Log == nil {
		e.Log = func(string, ...any) {}
	}
	if err := e.CreateTopic(ctx); err != nil {
		return nil, err
	}
	idempotent, err := e.IdempotentProduce(ctx)
	if err != nil {
		return nil, err
	}
	producer, err := e.InitProducerID(ctx, e.TransactionalID)
	if err != nil {
		return nil, err
	}
	committed, producer, err := e.Transaction(ctx, producer, commonv1.TransactionResult_TRANSACTION_RESULT_COMMIT, "committed")
	if err != nil {
		return nil, err
	}
	aborted, _, err := e.Transaction(ctx, producer, commonv1.TransactionResult_TRANSACTION_RESULT_ABORT, "aborted")
	if err != nil {
		return nil, err
	}
	report := &Report{
		Topic:    e.Topic,
		Produced: map[string][]string{"idempotent": idempotent, "committed": committed, "aborted": aborted},
		Kept:     []Kept{},
	}
	for _, p := range e.Partitions {
		kept, err := e.ReadCommitted(ctx, p.Partition)
		if err != nil {
			return nil, err
		}
		report.Kept = append(report.Kept, kept...)
	}
	return report, nil
}
