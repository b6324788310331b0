package watertightgrpc

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/watertight-go/watertight"
	"github.com/watertight-go/watertight/bulkhead"
	"github.com/watertight-go/watertight/circuit"
)

func (c *client) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	key := c.key(method, cc)
	var b *circuit.Breaker
	var h *bulkhead.Bulkhead
	var err error
	if c.breakers != nil {
		if b, err = c.breakers.Get(key); err != nil {
			return nil, c.reject(key, err)
		}
	}
	if c.bulkheads != nil {
		if h, err = c.bulkheads.Get(key); err != nil {
			return nil, c.reject(key, err)
		}
	}
	// The stream gets a context of its own, cancelled when it ends, so that
	// gRPC's resources go with the permits.
	cctx, cancel := context.WithCancel(ctx)
	actx, at, err := c.sendContext(cctx, nil)
	if err != nil {
		cancel()
		return nil, c.reject(key, err)
	}
	var permit circuit.Permit
	if b != nil {
		if permit, err = b.Allow(); err != nil {
			cancel()
			return nil, c.reject(key, err)
		}
	}
	if h != nil {
		if err := h.Acquire(actx); err != nil {
			permit.Record(actx, err) // a saturation: counted only if the breaker says so
			cancel()
			return nil, c.reject(key, err)
		}
	}
	actx, _ = outgoing(actx, true)
	s := &clientStream{actx: actx, at: at, cancel: cancel, permit: permit, bulk: h, cc: cc, serverStreams: desc.ServerStreams}
	cs, err := streamer(actx, desc, cc, method, opts...)
	if err != nil {
		s.finish(err)
		return nil, err
	}
	s.ClientStream = cs
	// The stream's end, when nobody reads it: the caller's context ends
	// (or the margin deadline passes), or the ClientConn is closed.
	// Both may run at once: finish waits for mu to read what they return.
	s.mu.Lock()
	s.stopCtx = context.AfterFunc(actx, s.ctxDone)
	s.stopConn = context.AfterFunc(cs.Context(), s.transportDone)
	s.mu.Unlock()
	return s, nil
}

// clientStream holds a stream's permits until it ends; see
// StreamClientInterceptor for what counts as the end.
type clientStream struct {
	grpc.ClientStream
	actx          context.Context // the stream's, derived from it
	at            time.Time       // the deadline sent; zero: none
	cancel        context.CancelFunc
	permit        circuit.Permit
	bulk          *bulkhead.Bulkhead
	cc            *grpc.ClientConn
	serverStreams bool

	mu       sync.Mutex
	stopCtx  func() bool // guarded by mu
	stopConn func() bool // guarded by mu

	done      atomic.Bool
	receiving atomic.Int32 // RecvMsg calls in progress (0 or 1)
}

// finish ends the stream once: it records err with the breaker, gives the
// bulkhead permit back and cancels the stream's context.
func (s *clientStream) finish(err error) {
	if !s.done.CompareAndSwap(false, true) {
		return
	}
	s.mu.Lock()
	stopCtx, stopConn := s.stopCtx, s.stopConn
	s.mu.Unlock()
	if stopCtx != nil {
		stopCtx()
		stopConn()
	}
	s.permit.Done(s.outcome(err))
	if s.bulk != nil {
		s.bulk.Release()
	}
	s.cancel()
}

// outcome is how the stream's end counts for the breaker: io.EOF and nil are
// a success; the caller's own cancellation or deadline (and the margin's) is
// Ignored; a status counts as ClassifyCode says.
func (s *clientStream) outcome(err error) watertight.Outcome {
	if err == nil || errors.Is(err, io.EOF) {
		return watertight.Success
	}
	if ownDeadline(s.actx, s.at, err) {
		return watertight.Ignored // the stream's own end: the caller's, not the server's
	}
	if st, ok := status.FromError(err); ok {
		o, _ := ClassifyCode(st.Code())
		return o
	}
	return watertight.Classify(s.actx, err)
}

// ctxDone ends the stream when its context ends.
func (s *clientStream) ctxDone() {
	s.finish(context.Cause(s.actx))
}

// transportDone ends the stream when the ClientConn was closed and nobody is
// reading: gRPC's transport stream ended, and nobody would see the status.
// When the ClientConn is open, the transport stream ended with a status that
// RecvMsg will return, and finish runs then.
func (s *clientStream) transportDone() {
	if s.receiving.Load() == 0 && s.cc != nil && s.cc.GetState() == connectivity.Shutdown {
		s.finish(status.Error(codes.Canceled, grpc.ErrClientConnClosing.Error()))
	}
}

// RecvMsg receives a message; see grpc.ClientStream. The stream ends when it
// returns an error, or, for a call whose server does not stream, when the
// single answer arrives.
func (s *clientStream) RecvMsg(m any) error {
	s.receiving.Add(1)
	err := s.ClientStream.RecvMsg(m)
	if err != nil || !s.serverStreams {
		s.finish(err) // before receiving drops: see transportDone
	}
	s.receiving.Add(-1)
	if err == nil && !s.done.Load() && s.ClientStream.Context().Err() != nil {
		// A buffered message came out after the transport stream ended:
		// transportDone may have let it be while this call was running.
		s.transportDone()
	}
	return err
}

// SendMsg sends a message; see grpc.ClientStream. An error other than io.EOF
// ends the stream (io.EOF means the status is to be read with RecvMsg).
func (s *clientStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if err != nil && !errors.Is(err, io.EOF) {
		s.finish(err)
	}
	return err
}

// Header returns the header metadata; see grpc.ClientStream. An error ends
// the stream.
func (s *clientStream) Header() (md metadata.MD, err error) {
	md, err = s.ClientStream.Header()
	if err != nil {
		s.finish(err)
	}
	return md, err
}
