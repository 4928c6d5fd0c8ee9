package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/functions/gateway/proxy"
	"github.com/tollgate/tollgate/infra/configstore"
	"github.com/tollgate/tollgate/infra/metrics"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/pricing"
)

// Batches: the gateway records who submitted each batch it admitted; the
// reconciler follows each to its end and charges what it used, once, to
// its submitter's token windows, buckets and budgets (and the provider's
// and model's), at the batch price.

// batchStore is where batch records live: the config store.
type batchStore interface {
	PutBatch(ctx context.Context, b configstore.Batch) error
	PendingBatches(ctx context.Context, cursor string, limit int) ([]configstore.Batch, string, error)
	FailBatch(ctx context.Context, b configstore.Batch, next time.Time) error
	FinishBatch(ctx context.Context, b configstore.Batch) error
}

// batchRecorder adapts the config store to the gateway.
type batchRecorder struct{ store batchStore }

func (r batchRecorder) RecordBatch(ctx context.Context, b proxy.BatchRecord) error {
	return r.store.PutBatch(ctx, configstore.Batch{Provider: b.Provider, ID: b.ID, UserPath: b.UserPath, KeyID: b.KeyID, Tags: b.Tags, SubmittedAt: b.SubmittedAt})
}

// How one reconciler run follows batches: at most batchesPerRun polls,
// over at most batchPagesPerRun pages of batchPage records, continuing
// where the last run stopped, so that batches which never end cannot keep
// later ones from being polled.
const (
	batchesPerRun    = 50
	batchPage        = 100
	batchPagesPerRun = 20
)

// A batch whose polls keep failing (deleted upstream, a provider that no
// longer knows it) is given up, uncharged and logged, after
// maxBatchFailures failures in a row, or maxBatchAge after it was
// submitted (providers end a batch within a day or two).
const (
	maxBatchFailures = 10
	maxBatchAge      = 7 * 24 * time.Hour
)

// batchRetry is the wait before polling a batch again after its failures:
// a minute doubling, at most an hour.
func batchRetry(failures int) time.Duration {
	return min(time.Minute<<min(failures, 6), time.Hour)
}

// BatchReport is what one look at the pending batches did.
type BatchReport struct {
	Pending, Ended, Charged, Failed, GivenUp int
}

// ChargeEndedBatches polls the pending batches that are due and charges
// those that ended. Charging is exactly once per batch and model, so a run
// that stops half-way is finished by the next.
func (a *App) ChargeEndedBatches(ctx context.Context) (BatchReport, error) {
	var rep BatchReport
	bs, ok := a.ConfigStore.(batchStore)
	if !ok {
		return rep, nil
	}
	now := a.Clock()
	var due []configstore.Batch
	a.batchMu.Lock()
	cursor := a.batchCursor
	a.batchMu.Unlock()
	for range batchPagesPerRun {
		page, next, err := bs.PendingBatches(ctx, cursor, batchPage)
		if err != nil {
			return rep, err
		}
		rep.Pending += len(page)
		for _, b := range page {
			if len(due) < batchesPerRun && !b.NextPoll.After(now) {
				due = append(due, b)
			}
		}
		cursor = next
		if next == "" || len(due) >= batchesPerRun {
			break
		}
	}
	a.batchMu.Lock()
	a.batchCursor = cursor
	a.batchMu.Unlock()
	if len(due) == 0 {
		return rep, nil
	}
	if a.Catalog == nil {
		// Only now: the providers' keys are read once, and only by a run
		// that has batches to follow.
		catalog, err := a.buildCatalog(ctx)
		if err != nil {
			return rep, fmt.Errorf("providers: %w", err)
		}
		a.Catalog = catalog
	}
	var errs []error
	for _, b := range due {
		errs = append(errs, a.followBatch(ctx, bs, b, now, &rep))
	}
	return rep, errors.Join(errs...)
}

// followBatch polls one batch, charging it when it has ended, and gives it
// up when its polls have failed too often or for too long.
func (a *App) followBatch(ctx context.Context, bs batchStore, b configstore.Batch, now time.Time, rep *BatchReport) error {
	p, found := a.Catalog.Provider(b.Provider)
	poller, polls := p.(providers.BatchPoller)
	if !found || !polls {
		a.Log.Error("a recorded batch's provider cannot be polled; forgetting it uncharged", "provider", b.Provider, "batch", b.ID)
		rep.GivenUp++
		a.Metrics.Count(metrics.BatchesGivenUp, 1)
		return bs.FinishBatch(ctx, b)
	}
	out, err := poller.PollBatch(ctx, b.ID)
	if err != nil {
		rep.Failed++
		if b.Failures+1 >= maxBatchFailures || now.Sub(b.SubmittedAt) > maxBatchAge {
			a.Log.Error("giving up on a batch whose polls keep failing; its usage is not charged", "provider", b.Provider, "batch", b.ID,
				"user_path", b.UserPath, "failures", b.Failures+1, "submitted_at", b.SubmittedAt, "err", err)
			rep.GivenUp++
			a.Metrics.Count(metrics.BatchesGivenUp, 1)
			return bs.FinishBatch(ctx, b)
		}
		next := now.Add(batchRetry(b.Failures))
		a.Log.Warn("could not poll a batch; trying again later", "provider", b.Provider, "batch", b.ID, "failures", b.Failures+1,
			"next_poll", next, "err", err)
		return bs.FailBatch(ctx, b, next)
	}
	if !out.Done {
		if now.Sub(b.SubmittedAt) > maxBatchAge {
			a.Log.Error("giving up on a batch that has not ended in a week; its usage is not charged", "provider", b.Provider, "batch", b.ID,
				"user_path", b.UserPath, "submitted_at", b.SubmittedAt, "status", out.Status)
			rep.GivenUp++
			a.Metrics.Count(metrics.BatchesGivenUp, 1)
			return bs.FinishBatch(ctx, b)
		}
		return nil
	}
	rep.Ended++
	prices := a.Config.PriceTable()
	for model, u := range out.Usage {
		list, _ := prices.Lookup(b.Provider, model)
		price := pricing.Batch(list)
		s := limiter.Subject{UserPath: b.UserPath, Provider: b.Provider, Model: model, Key: b.KeyID, Tags: b.Tags}
		used := limiter.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CachedInputTokens: u.CachedInputTokens, CachedInInput: u.CachedInInput}
		applied, err := a.Limiter.Bill(ctx, a.Clock(), batchChargeID(b, model), s, used, price)
		if err != nil {
			return fmt.Errorf("charging batch %s: %w", b.ID, err)
		}
		a.Log.Info("batch charged", "provider", b.Provider, "batch", b.ID, "status", out.Status, "user_path", b.UserPath,
			"model", model, "input_tokens", u.InputTokens, "output_tokens", u.OutputTokens,
			"cost_usd", limiter.FormatUSD(price.Cost(used)), "applied_now", applied)
	}
	rep.Charged++
	return bs.FinishBatch(ctx, b)
}

// batchChargeID names one batch's charge for one model: what makes it
// exactly once.
func batchChargeID(b configstore.Batch, model string) string {
	sum := sha256.Sum256([]byte(b.Provider + "\x00" + b.ID + "\x00" + model))
	return "batch." + hex.EncodeToString(sum[:12])
}

// sessionStore is where Realtime sessions' leases wait for their end.
type sessionStore interface {
	PutSession(ctx context.Context, s configstore.Session) error
	TakeSession(ctx context.Context, id, within string) (configstore.Session, error)
}

// sessions adapts the config store to the gateway.
type sessions struct{ store sessionStore }

func (s sessions) PutSession(ctx context.Context, r proxy.SessionRecord) error {
	return s.store.PutSession(ctx, configstore.Session{Provider: r.Provider, ID: r.ID, UserPath: r.UserPath, Lease: r.Lease})
}

func (s sessions) TakeSession(ctx context.Context, id, within string) (proxy.SessionRecord, error) {
	got, err := s.store.TakeSession(ctx, id, within)
	if errors.Is(err, configstore.ErrNotFound) {
		return proxy.SessionRecord{}, proxy.ErrUnknownSession
	}
	return proxy.SessionRecord{Provider: got.Provider, ID: got.ID, UserPath: got.UserPath, Lease: got.Lease}, err
}
