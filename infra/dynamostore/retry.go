package dynamostore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	mrand "math/rand/v2"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/tollgate/tollgate/infra/awserr"
)

// A window counter's ADD is not idempotent: sent twice, it counts twice.
// So the SDK may resend it only when the failure proves it was not
// applied (throttling, a conflict, a connection never made); after an
// ambiguous failure (a timeout, a reset, a 500 that applied anyway) the
// store finds out by reading the counter's last-writer token. Every other
// write the store makes is idempotent or verified by its condition, and
// keeps the SDK's ordinary retries.

// noBlindRetry is the per-call option of non-idempotent writes.
func noBlindRetry(o *dynamodb.Options) {
	if o.Retryer != nil {
		o.Retryer = unappliedOnly{o.Retryer}
	}
}

// unappliedOnly retries only failures that prove nothing was applied.
type unappliedOnly struct{ aws.Retryer }

func (r unappliedOnly) IsErrorRetryable(err error) bool {
	return awserr.NotApplied(err) && r.Retryer.IsErrorRetryable(err)
}

func (r unappliedOnly) GetAttemptToken(ctx context.Context) (func(error) error, error) {
	if v2, ok := r.Retryer.(aws.RetryerV2); ok {
		return v2.GetAttemptToken(ctx)
	}
	return r.Retryer.GetInitialToken(), nil
}

// writeToken returns a fresh writer token: 6 random bytes (a false
// match, another writer's token equal to ours, is 1 in 2^48).
func writeToken() []byte {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		binary.LittleEndian.PutUint64(b[:], mrand.Uint64())
	}
	return b[:tokenBytes]
}

const tokenBytes = 6

// A window counter's writers leave their tokens in one of a few slots of
// the counter's item, chosen by the token: after a lost answer the
// writer reads its slot, and finds its token unless another writer chose
// the same slot in between. With one slot, as before, under concurrency
// that was the rule (an rpm=20 rule with 20 % of answers lost admitted
// 15 to 17 of 20); with n slots a writer's token survives k writes after
// it with probability ((n-1)/n)^k (63/64 a write). The slots are as many
// as keep the whole item under 1 KB, one write unit, whatever its key:
// at most maxWriterSlots, at least minWriterSlots.
const (
	maxWriterSlots = 64
	minWriterSlots = 8
	// itemBudget is what an item may take: 1 KB, less room for its
	// count, reservation, TTL and their names.
	itemBudget = 1024 - 48
	slotBytes  = 3 + tokenBytes // "w63" and a token
)

// writerSlots is how many writer slots the counter item with key pk has.
func writerSlots(pk string) int {
	return min(maxWriterSlots, max(minWriterSlots, (itemBudget-len(attrPK)-len(pk))/slotBytes))
}

// writerSlot names the slot of pk's item token tok goes in.
func writerSlot(pk string, tok []byte) string {
	h := uint32(2166136261)
	for _, c := range tok {
		h = (h ^ uint32(c)) * 16777619
	}
	return attrWriter + strconv.Itoa(int(h%uint32(writerSlots(pk))))
}

// backoff is the wait before retry attempt (1-based): jittered, growing,
// bounded.
func backoff(attempt int) time.Duration {
	base := time.Duration(10<<min(attempt, 5)) * time.Millisecond
	return base/2 + time.Duration(mrand.Int64N(int64(base/2)+1))
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// retryUnapplied runs fn until it succeeds, fails in a way that may have
// applied it, or attempts run out: for writes that are safe to resend only
// when the last one was certainly not applied.
func retryUnapplied(ctx context.Context, attempts int, fn func() error) error {
	var err error
	for a := range attempts {
		if a > 0 {
			if werr := sleep(ctx, backoff(a)); werr != nil {
				return errors.Join(err, werr)
			}
		}
		if err = fn(); err == nil || !awserr.NotApplied(err) || awserr.IsConditionFailed(err) {
			return err
		}
	}
	return err
}
