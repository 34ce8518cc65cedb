// Command example runs oncelog's API from Go against a running cluster:
//
//	go run ./cmd/example --bootstrap 127.0.0.1:7102 [--topic go-example] [--transactional-id go-example] [--json]
//
// It creates a topic with two partitions, writes with an idempotent producer, commits one transaction and
// aborts another (InitProducerId, AddPartitionsToTxn, Produce of a RecordBatch v2 it builds itself, EndTxn),
// then reads both partitions read_committed and prints the records it keeps. --json prints a
// machine-readable summary instead. With ONCELOG_TLS_CA it connects over TLS.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"oncelog/clients/go/oncelog"
)

func main() {
	bootstrap := flag.String("bootstrap", os.Getenv("ONCELOG_BOOTSTRAP"), "address of any oncelog service (or ONCELOG_BOOTSTRAP)")
	topic := flag.String("topic", "go-example", "topic to create and write")
	tid := flag.String("transactional-id", "go-example", "transactional id of the transactions")
	asJSON := flag.Bool("json", false, "print a machine-readable summary on stdout")
	flag.Parse()
	if *bootstrap == "" {
		fmt.Fprintln(os.Stderr, "give the address of any oncelog service: --bootstrap host:port (or ONCELOG_BOOTSTRAP)")
		os.Exit(2)
	}
	logf := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	if *asJSON {
		logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	}
	example := &oncelog.Example{Bootstrap: *bootstrap, Topic: *topic, TransactionalID: *tid, Log: logf}
	defer example.Conns.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	report, err := example.Run(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "oncelog go example failed: %v\n", err)
		os.Exit(1)
	}
	if *asJSON {
		_ = json.NewEncoder(os.Stdout).Encode(report)
		return
	}
	logf("read_committed sees %d records:", len(report.Kept))
	for _, k := range report.Kept {
		logf("  %s-%d@%d %s", report.Topic, k.Partition, k.Offset, k.Value)
	}
}
