package oncelog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	clusterv1 "oncelog/clients/go/gen/oncelog/api/cluster/v1"
	commonv1 "oncelog/clients/go/gen/oncelog/api/common/v1"
)

// bootstrap is the address of a running cluster; tests/integration/test_go_client.py starts a LocalCluster
// and passes it. Without it the cluster tests are skipped (the Python test asserts they ran).
func bootstrap(t *testing.T) string {
	address := os.Getenv("ONCELOG_BOOTSTRAP")
	if address == "" {
		t.Skip("ONCELOG_BOOTSTRAP is not set: no cluster to run against")
	}
	return address
}

// TestReadCommittedSeesExactlyTheCommittedRecords runs the example and checks what a read_committed
// reader keeps: the idempotent and committed records, never the aborted ones.
func TestReadCommittedSeesExactlyTheCommittedRecords(t *testing.T) {
	topic := fmt.Sprintf("go-test-%d", time.Now().UnixNano())
	example := &Example{Bootstrap: bootstrap(t), Topic: topic, TransactionalID: topic + "-txn", Log: t.Logf}
	defer example.Conns.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	report, err := example.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, k := range report.Kept {
		seen = append(seen, k.Value)
	}
	want := append(append([]string{}, report.Produced["idempotent"]...), report.Produced["committed"]...)
	slices.Sort(seen)
	slices.Sort(want)
	if !slices.Equal(seen, want) {
		t.Fatalf("read_committed kept %v, want exactly the idempotent and committed records %v", seen, want)
	}
	if len(report.Produced["aborted"]) != 4 {
		t.Fatalf("the aborted transaction wrote %v", report.Produced["aborted"])
	}
}

// TestFatalErrorCarriesErrorInfo asks for something the server refuses for good and checks that the
// ErrorInfo trailer is decoded and says not retriable, so Call gives up after one attempt.
func TestFatalErrorCarriesErrorInfo(t *testing.T) {
	conns := &Conns{}
	defer conns.Close()
	conn, err := conns.Get(bootstrap(t))
	if err != nil {
		t.Fatal(err)
	}
	cluster := clusterv1.NewClusterServiceClient(conn)
	attempts := 0
	_, err = Call(context.Background(), "CreateTopics", func(ctx context.Context) (*clusterv1.CreateTopicsResponse, error) {
		attempts++
		return cluster.CreateTopics(ctx, &clusterv1.CreateTopicsRequest{
			Topics: []*clusterv1.TopicSpec{{Name: "go-bad/name", Partitions: 1}},
		})
	})
	var callErr *CallError
	if !errors.As(err, &callErr) {
		t.Fatalf("want a CallError, got %v", err)
	}
	info := Info(err)
	if info == nil || info.GetReason() != commonv1.ErrorReason_ERROR_REASON_INVALID_TOPIC || info.GetRetriable() {
		t.Fatalf("want a fatal INVALID_TOPIC ErrorInfo, got %v (%v)", info, err)
	}
	if attempts != 1 || callErr.Reason != "INVALID_TOPIC" {
		t.Fatalf("a fatal error took %d attempts (reason %q)", attempts, callErr.Reason)
	}
}

// TestRetriableDecision needs no cluster: the decision follows the ErrorInfo, else UNAVAILABLE only.
func TestRetriableDecision(t *testing.T) {
	withInfo := func(code codes.Code, info *commonv1.ErrorInfo) error {
		detail, err := anypb.New(info)
		if err != nil {
			t.Fatal(err)
		}
		return status.ErrorProto(&spb.Status{Code: int32(code), Message: "x", Details: []*anypb.Any{detail}})
	}
	cases := []struct {
		err  error
		want bool
	}{
		{withInfo(codes.Aborted, &commonv1.ErrorInfo{Reason: commonv1.ErrorReason_ERROR_REASON_CONCURRENT_TRANSACTIONS, Retriable: true}), true},
		{withInfo(codes.Unavailable, &commonv1.ErrorInfo{Reason: commonv1.ErrorReason_ERROR_REASON_PRODUCER_FENCED}), false},
		{status.Error(codes.Unavailable, "connection refused"), true},
		{status.Error(codes.InvalidArgument, "bad"), false},
	}
	for i, c := range cases {
		if got := Retriable(c.err); got != c.want {
			t.Errorf("case %d (%v): Retriable = %v, want %v", i, c.err, got, c.want)
		}
	}
	if got := Reason(cases[0].err); got != "CONCURRENT_TRANSACTIONS" {
		t.Errorf("Reason = %q", got)
	}
}
