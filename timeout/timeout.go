package timeout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/watertight-go/watertight"
)

// ErrTimeout matches, with errors.Is, every error a Timeout returns when its
// own deadline ended the call.
var ErrTimeout = errors.New("timeout: deadline exceeded")

// DefaultTimeout is the timeout used when Config.Timeout is zero.
const DefaultTimeout = 10 * time.Second

// Config configures a Timeout.
type Config struct {
	// Name labels the timeout in errors ("attempt", "total", a dependency).
	// It may be empty.
	Name string
	// Timeout is how long a call may take. Zero means DefaultTimeout; a
	// negative value disables the timeout (the policy lets calls through
	// unchanged).
	Timeout time.Duration
	// Abandon makes the call return at the deadline even when the function
	// ignores its context; the function goes on in its own goroutine until
	// it returns. A pipeline holding such a timeout must be run with
	// watertight.DoDetached, which keeps the bulkhead permits outside the
	// timeout held until the abandoned work ends. Use it only for code you
	// cannot make honour its context: every abandoned call still holds its
	// goroutine and its resources.
	Abandon bool
}

// DefaultConfig returns the configuration New uses for zero fields: a
// 10-second timeout that does not abandon.
func DefaultConfig() Config { return Config{Timeout: DefaultTimeout} }

// Timeout is a watertight.Policy that bounds each call's duration. It is safe
// for concurrent use; build it with New.
type Timeout struct {
	d       time.Duration
	abandon bool
	cause   *Error // the cause set on every context this timeout derives
}

// New returns a Timeout for cfg. It never fails today; it returns an error to
// keep the constructor's shape shared by every package.
func New(cfg Config) (*Timeout, error) {
	d := cfg.Timeout
	if d == 0 {
		d = DefaultTimeout
	}
	t := &Timeout{d: d, abandon: cfg.Abandon}
	t.cause = &Error{Name: cfg.Name, Timeout: d}
	return t, nil
}

// Duration returns the timeout; a negative value means disabled.
func (t *Timeout) Duration() time.Duration { return t.d }

// Enter derives a context that ends after the timeout, with this timeout as
// its cause. When the parent's deadline comes first, the parent's deadline
// and cause stand: that is the caller's timeout, not ours.
func (t *Timeout) Enter(ctx context.Context) (context.Context, watertight.Ticket, error) {
	if t.d < 0 {
		return ctx, watertight.Ticket{}, nil
	}
	c, cancel := context.WithTimeoutCause(ctx, t.d, t.cause)
	return c, watertight.Ticket{Cancel: cancel}, nil
}

// Exit releases the derived context. When the call failed because this
// timeout ended it, Exit returns an *Error wrapping the call's error, so that
// errors.Is(err, ErrTimeout) and errors.Is(err, context.DeadlineExceeded) both
// hold; any other error passes through unchanged.
func (t *Timeout) Exit(ctx context.Context, tk watertight.Ticket, err error) error {
	if tk.Cancel == nil {
		return err
	}
	if err != nil && ctx.Err() != nil && context.Cause(ctx) == error(t.cause) {
		var own *Error
		if !errors.As(err, &own) || own.Timeout != t.d || own.Name != t.cause.Name {
			err = &Error{Name: t.cause.Name, Timeout: t.d, Err: err}
		}
	}
	tk.Cancel()
	return err
}

// Detaches reports whether the timeout abandons calls at its deadline; see
// Config.Abandon and watertight.Detacher. A disabled timeout (negative
// Config.Timeout) has no deadline and never detaches.
func (t *Timeout) Detaches() bool { return t.abandon && t.d >= 0 }

// Error is the error of a call that this package's timeout ended, and the
// cause (context.Cause) of the contexts it derives.
type Error struct {
	// Name is the timeout's Config.Name.
	Name string
	// Timeout is the duration that ran out.
	Timeout time.Duration
	// Err is what the call returned when it ended, often
	// context.DeadlineExceeded; nil in the context's cause.
	Err error
}

// Error describes the timeout, for example
// "timeout: attempt: timed out after 2s: context deadline exceeded".
func (e *Error) Error() string {
	msg := "timeout: "
	if e.Name != "" {
		msg += e.Name + ": "
	}
	msg += fmt.Sprintf("timed out after %v", e.Timeout)
	if e.Err != nil && e.Err != context.DeadlineExceeded {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the call's error.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is ErrTimeout or context.DeadlineExceeded.
func (e *Error) Is(target error) bool {
	return target == ErrTimeout || target == context.DeadlineExceeded
}
