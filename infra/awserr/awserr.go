// Package awserr classifies AWS SDK errors, once, into the sentinels the
// rest of tollgate decides on: a store that cannot answer
// (limiter.ErrStoreUnavailable) and writes that conflicted
// (limiter.ErrContention). Nothing outside infra/ inspects AWS error codes.
package awserr

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/tollgate/tollgate/limiter"
)

// Error codes worth naming.
const (
	CodeConditionalCheckFailed = "ConditionalCheckFailedException"
	CodeTransactionCanceled    = "TransactionCanceledException"
	CodeTransactionConflict    = "TransactionConflictException"
	CodeResourceNotFound       = "ResourceNotFoundException"
	CodeResourceInUse          = "ResourceInUseException"
	CodeExpiredIterator        = "ExpiredIteratorException"
	CodeTrimmedDataAccess      = "TrimmedDataAccessException"
)

// Code returns the AWS error code of err, or "".
func Code(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// IsConditionFailed reports whether err is a failed condition expression
// of a single-item write: a refusal, not a failure.
func IsConditionFailed(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}

// CancellationReasons returns the per-item reason codes of a cancelled
// transaction ("None", "ConditionalCheckFailed", "TransactionConflict",
// ...), or nil when err is not a cancellation.
func CancellationReasons(err error) []types.CancellationReason {
	var tc *types.TransactionCanceledException
	if errors.As(err, &tc) {
		return tc.CancellationReasons
	}
	return nil
}

// IsConflict reports whether err is a transaction conflict: a plain write
// to an item inside a pending transaction, or a transaction cancelled
// because another one touched its items. Retrying may succeed.
func IsConflict(err error) bool {
	if Code(err) == CodeTransactionConflict {
		return true
	}
	for _, r := range CancellationReasons(err) {
		if r.Code != nil && *r.Code == "TransactionConflict" {
			return true
		}
	}
	return false
}

// unapplied are the error codes of a request DynamoDB refused without
// applying it: throttling, and a write to an item inside a pending
// transaction.
var unapplied = map[string]bool{
	"ProvisionedThroughputExceededException": true,
	"ThrottlingException":                    true,
	"RequestLimitExceeded":                   true,
	CodeTransactionConflict:                  true,
}

// NotApplied reports whether err proves that the request was not applied:
// DynamoDB refused it (throttling, a transaction conflict, a failed
// condition), or it never left this process (the connection could not be
// made). Every other failure (a timeout, a reset, a 500) is ambiguous: the
// write may have been applied and only its answer lost.
func NotApplied(err error) bool {
	if err == nil {
		return false
	}
	if unapplied[Code(err)] || IsConditionFailed(err) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// Classify wraps a backend error with the sentinel that says what it means
// for admission. Cancellation by the caller's context is passed through.
func Classify(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("%s: %w", op, err)
	case IsConflict(err):
		return fmt.Errorf("%s: %w: %w", op, limiter.ErrContention, err)
	}
	// Throttling after the SDK's retries, an unreachable endpoint, a
	// timeout, a missing table, a server error: the store cannot answer.
	return fmt.Errorf("%s: %w: %w", op, limiter.ErrStoreUnavailable, err)
}
