// Package oncelog speaks oncelog's gRPC API from Go with the code generated from proto/ (clients/go/gen):
// discovery through ClusterService, an idempotent produce, transactions (InitProducerId,
// AddPartitionsToTxn, Produce of RecordBatch v2 built by package recordbatch, EndTxn) and a
// read_committed fetch.
//
// Every failed call carries an oncelog.api.common.v1.ErrorInfo in its grpc-status-details-bin trailer
// (a google.rpc.Status); Info decodes it and Call retries a call whose ErrorInfo says retriable, with
// the same request (an EndTxn retry is recognised by the coordinator, so it never commits twice).
package oncelog

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	commonv1 "oncelog/clients/go/gen/oncelog/api/common/v1"
)

// Info returns the ErrorInfo a failed call carries in grpc-status-details-bin, or nil.
func Info(err error) *commonv1.ErrorInfo {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	for _, detail := range st.Details() {
		if info, ok := detail.(*commonv1.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

// Reason is the ErrorReason of a failed call without its ERROR_REASON_ prefix (the gRPC code when the
// server sent no ErrorInfo).
func Reason(err error) string {
	if info := Info(err); info != nil {
		return strings.TrimPrefix(info.GetReason().String(), "ERROR_REASON_")
	}
	return status.Code(err).String()
}

// Retriable tells whether sending the same request again may succeed: the server's ErrorInfo decides;
// without one, only UNAVAILABLE (the call never reached a server) is worth another try.
func Retriable(err error) bool {
	if info := Info(err); info != nil {
		return info.GetRetriable()
	}
	return status.Code(err) == codes.Unavailable
}

// CallError is a call that failed for good: fatal, or retriable but out of attempts.
type CallError struct {
	Method string
	Reason string
	Err    error
}

func (e *CallError) Error() string {
	msg := status.Convert(e.Err).Message()
	if info := Info(e.Err); info != nil {
		msg = info.GetMessage()
	}
	return fmt.Sprintf("%s: %s: %s", e.Method, e.Reason, msg)
}

func (e *CallError) Unwrap() error { return e.Err }

// Call runs fn with a per-attempt deadline and retries it with backoff while the error is retriable.
func Call[T any](ctx context.Context, method string, fn func(context.Context) (T, error)) (T, error) {
	const attempts = 50
	for attempt := 1; ; attempt++ {
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		out, err := fn(callCtx)
		cancel()
		if err == nil {
			return out, nil
		}
		if !Retriable(err) || attempt >= attempts {
			var zero T
			return zero, &CallError{Method: method, Reason: Reason(err), Err: err}
		}
		backoff := min(time.Duration(20<<min(attempt, 5))*time.Millisecond, 500*time.Millisecond)
		select {
		case <-ctx.Done():
			var zero T
			return zero, ctx.Err()
		case <-time.After(backoff):
		}
	}
}

// IsReason tells whether err is a CallError with the given reason (without ERROR_REASON_).
func IsReason(err error, reason string) bool {
	var ce *CallError
	return errors.As(err, &ce) && ce.Reason == reason
}

// Conns keeps one client connection per address, like one channel per node.
type Conns struct {
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// transportCredentials is plaintext, or TLS with ONCELOG_TLS_CA (and ONCELOG_TLS_CERT/ONCELOG_TLS_KEY for mTLS).
func transportCredentials() (credentials.TransportCredentials, error) {
	ca := os.Getenv("ONCELOG_TLS_CA")
	if ca == "" {
		return insecure.NewCredentials(), nil
	}
	pem, err := os.ReadFile(ca)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", ca)
	}
	config := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if cert, key := os.Getenv("ONCELOG_TLS_CERT"), os.Getenv("ONCELOG_TLS_KEY"); cert != "" && key != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, err
		}
		config.Certificates = []tls.Certificate{pair}
	}
	return credentials.NewTLS(config), nil
}

// Get returns the connection to address, dialling it on first use.
func (c *Conns) Get(address string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if conn, ok := c.conns[address]; ok {
		return conn, nil
	}
	creds, err := transportCredentials()
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(address, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, err
	}
	if c.conns == nil {
		c.conns = map[string]*grpc.ClientConn{}
	}
	c.conns[address] = conn
	return conn, nil
}

// Close closes every connection.
func (c *Conns) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		_ = conn.Close()
	}
	c.conns = nil
}
