package watertighthttp

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/retry"
)

// gRPC over the Transport (TransportConfig.GRPC): a gRPC call is an HTTP/2
// POST whose answer is 200 with its status in grpc-status, in the header
// of a trailers-only answer (what servers send for an error before any
// message) or in the trailers after the body. The Transport judges the
// trailers-only status as contrib/watertightgrpc does a call's, sends the
// time left as grpc-timeout, and honours grpc-retry-pushback-ms.

// The gRPC status codes the Transport reads (google.golang.org/grpc/codes,
// without the dependency).
const (
	grpcOK                 = 0
	grpcCanceled           = 1
	grpcInvalidArgument    = 3
	grpcDeadlineExceeded   = 4
	grpcNotFound           = 5
	grpcAlreadyExists      = 6
	grpcPermissionDenied   = 7
	grpcResourceExhausted  = 8
	grpcFailedPrecondition = 9
	grpcAborted            = 10
	grpcOutOfRange         = 11
	grpcUnimplemented      = 12
	grpcUnavailable        = 14
	grpcUnauthenticated    = 16
)

// Header names of gRPC's wire format.
const (
	HeaderGRPCStatus   = "Grpc-Status"
	HeaderGRPCMessage  = "Grpc-Message"
	HeaderGRPCPushback = "Grpc-Retry-Pushback-Ms"
	headerGRPCTimeout  = "Grpc-Timeout"
)

// ClassifyGRPCStatus reports how a gRPC status code counts, as
// contrib/watertightgrpc.ClassifyCode does: OK a Success; UNAVAILABLE and
// DEADLINE_EXCEEDED a Failure and transient; the caller's own errors and
// conflicts (CANCELLED, INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS,
// PERMISSION_DENIED, FAILED_PRECONDITION, ABORTED, OUT_OF_RANGE,
// UNIMPLEMENTED, UNAUTHENTICATED) Ignored; any other (UNKNOWN, INTERNAL,
// DATA_LOSS, RESOURCE_EXHAUSTED...) a Failure, not transient.
func ClassifyGRPCStatus(code int) (o watertight.Outcome, transient bool) {
	switch code {
	case grpcOK:
		return watertight.Success, false
	case grpcUnavailable, grpcDeadlineExceeded:
		return watertight.Failure, true
	case grpcCanceled, grpcInvalidArgument, grpcNotFound, grpcAlreadyExists, grpcPermissionDenied,
		grpcFailedPrecondition, grpcAborted, grpcOutOfRange, grpcUnimplemented, grpcUnauthenticated:
		return watertight.Ignored, false
	}
	return watertight.Failure, false
}

// grpcStatus returns the gRPC status of a trailers-only answer, and
// whether it has one.
func grpcStatus(resp *http.Response) (int, bool) {
	vs := resp.Header[HeaderGRPCStatus]
	if resp.StatusCode != http.StatusOK || len(vs) == 0 {
		return 0, false
	}
	c, err := strconv.Atoi(strings.TrimSpace(vs[0]))
	if err != nil || c < 0 {
		return 2, true // UNKNOWN, as gRPC reads a malformed status
	}
	return c, true
}

// grpcStatusError returns the error of a gRPC answer whose trailers-only
// status is not OK (nil otherwise): a *StatusError that counts as the
// status does, waiting the server's pushback before a retry, or carrying
// the overloaded signal when the pushback says not to retry.
func grpcStatusError(resp *http.Response) error {
	code, ok := grpcStatus(resp)
	if !ok {
		return statusError(resp)
	}
	if code == grpcOK {
		return nil
	}
	se := &StatusError{Response: resp, grpc: code + 1}
	if vs := resp.Header[HeaderGRPCPushback]; len(vs) > 0 {
		ms, err := strconv.ParseInt(strings.TrimSpace(vs[0]), 10, 64)
		if err != nil || ms < 0 {
			se.noRetry = true // the server asks not to be retried
			return se
		}
		if _, transient := ClassifyGRPCStatus(code); transient || code == grpcResourceExhausted {
			return retry.After(se, time.Duration(ms)*time.Millisecond)
		}
	}
	return se
}

// formatGRPCTimeout formats d as a grpc-timeout value: at most 8 digits
// and a unit, rounded up so that the callee never gets more time than is
// left (m: milliseconds up to 99,999,999; then S: seconds).
func formatGRPCTimeout(d time.Duration) string {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	if ms < 100_000_000 {
		return strconv.FormatInt(int64(ms), 10) + "m"
	}
	return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10) + "S"
}
