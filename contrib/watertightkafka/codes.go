package watertightkafka

import (
	"errors"

	"github.com/watertight-go/watertight/retry"
)

// source is the Source of the package's events.
const source = "kafka"

// The codes of the package's events (watertight.Event.Code) and of the
// HeaderCode header of dead letters: stable, machine-readable reasons for
// metric labels, dashboards and alerts. They keep their meaning across
// versions; the words for people are in the event's Reason.
const (
	// CodeQueueFull: EventStateChange, Key the lane, From "flowing" To
	// "paused": the lane's workers were busy and its queue full, so its
	// partitions were paused.
	CodeQueueFull = "queue_full"
	// CodeBreakerOpen: EventStateChange, Key the lane, From "flowing" To
	// "paused": the lane's breaker refused a record, which is held, and
	// its partitions were paused until half-open trials pass.
	CodeBreakerOpen = "breaker_open"
	// CodeRefused: EventStateChange, Key the lane, From "flowing" To
	// "paused": a protection other than the lane's breaker refused a record
	// (its handler answered with a rejection, such as a full bulkhead or
	// another breaker; the idempotency store was full of claims; or
	// another execution holds the record's claim). The record is held and
	// tried again every ProbeInterval, with the lane's partitions paused.
	CodeRefused = "refused"
	// CodeResumed: EventStateChange, Key the lane, From "paused" To
	// "flowing": every held record of the lane went to its pool, so its
	// partitions are fetched again.
	CodeResumed = "resumed"
	// CodeAssigned: EventStateChange, Key the topic, To "assigned":
	// partitions (Attempt: how many) were assigned to this consumer.
	CodeAssigned = "assigned"
	// CodeRevoked: EventStateChange, Key the topic, To "revoked":
	// partitions (Attempt: how many) were revoked; their finished records
	// were committed.
	CodeRevoked = "revoked"
	// CodeLost: EventStateChange, Key the topic, To "lost": partitions
	// (Attempt: how many) were lost (the group session ended); their
	// records in progress were abandoned and nothing was committed.
	CodeLost = "lost"
	// CodeAbandoned: EventDropped, Key the topic: Attempt records of
	// revoked, lost or closed partitions were left unfinished (still
	// running after RevokeTimeout, queued, or held); Err is ErrAbandoned.
	// They are not committed: the partitions' next owner runs them.
	CodeAbandoned = "abandoned"
	// CodeDeadLettered: EventDropped, Key the lane: a record that failed
	// was written to its dead-letter topic; Err is the failure, Attempt
	// the attempts made, and the dead letter's HeaderCode says why (one of
	// the codes below, or a retry package code: retry.CodeMaxAttempts,
	// retry.CodeNoBudget, retry.CodeNoConcurrency, retry.CodeNoTime,
	// retry.CodeRetryAfterTooLong, retry.CodeNotIdempotent).
	CodeDeadLettered = "dead_lettered"
	// CodeNotRetryable: a dead letter's HeaderCode: the handler's error
	// was not worth retrying (the lane's retry policy classifies it as
	// permanent, or retries are off).
	CodeNotRetryable = "not_retryable"
	// CodeHandlerPanic: a dead letter's HeaderCode: the handler panicked.
	CodeHandlerPanic = "handler_panic"
	// CodeOutcomeUnknown: a dead letter's HeaderCode, and EventDropped's
	// Code: the idempotency store says the record's processing started
	// once and never recorded an outcome (the process died while its
	// handler ran): it is not run a second time.
	CodeOutcomeUnknown = "outcome_unknown"
	// CodeIdempotencyStore: a dead letter's HeaderCode: the idempotency
	// store kept failing for the record through every attempt.
	CodeIdempotencyStore = "idempotency_store"
	// CodeDeadLetterFailed: EventRetryScheduled, Key the lane: writing a
	// dead letter failed (Err) and is tried again after Delay; the
	// record's partition does not move on meanwhile.
	CodeDeadLetterFailed = "dead_letter_failed"
	// CodeDuplicate: EventReplayed, Key the lane: the idempotency store
	// says the record was processed already; it is skipped.
	CodeDuplicate = "duplicate"
	// CodeCommitFailed: EventRejected: an offset commit failed (Err); the
	// next one carries the same offsets.
	CodeCommitFailed = "commit_failed"
	// CodeFetchError: EventRejected, Key the topic: a fetch returned an
	// error (Err); franz-go retries on its own.
	CodeFetchError = "fetch_error"
)

// Headers that a dead letter carries beside the record's own.
const (
	// HeaderCode holds the reason's code (CodeNotRetryable, ...).
	HeaderCode = "watertight-dlq-code"
	// HeaderError holds the last error's text.
	HeaderError = "watertight-dlq-error"
	// HeaderAttempts holds the number of handler attempts made, in decimal.
	HeaderAttempts = "watertight-dlq-attempts"
	// HeaderTopic, HeaderPartition and HeaderOffset locate the original
	// record (partition and offset in decimal).
	HeaderTopic     = "watertight-dlq-topic"
	HeaderPartition = "watertight-dlq-partition"
	HeaderOffset    = "watertight-dlq-offset"
	// HeaderLane holds the lane that processed it.
	HeaderLane = "watertight-dlq-lane"
)

// failureCode maps the error a lane's retry policy ended with to a dead
// letter's code.
func failureCode(err error) string {
	var exhausted *retry.ExhaustedError
	var after *retry.RetryAfterError
	var panicked *handlerPanic
	switch {
	case errors.As(err, &panicked):
		return CodeHandlerPanic
	case errors.As(err, &exhausted):
		return retry.CodeMaxAttempts
	case errors.As(err, &after):
		return retry.CodeRetryAfterTooLong
	case errors.Is(err, retry.ErrNoBudget):
		return retry.CodeNoBudget
	case errors.Is(err, retry.ErrNoConcurrency):
		return retry.CodeNoConcurrency
	case errors.Is(err, retry.ErrNoTime):
		return retry.CodeNoTime
	case errors.Is(err, retry.ErrNotIdempotent):
		return retry.CodeNotIdempotent
	case errors.Is(err, errStore):
		return CodeIdempotencyStore
	}
	return CodeNotRetryable
}
