package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/tollgate/tollgate/functions/gateway/proxy"
	"github.com/tollgate/tollgate/infra/configstore"
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
	PendingBatches(ctx context.Context, limit int) ([]configstore.Batch, error)
	FinishBatch(ctx context.Context, b configstore.Batch) error
}

// batchRecorder adapts the config store to the gateway.
type batchRecorder struct{ store batchStore }

func (r batchRecorder) RecordBatch(ctx context.Context, b proxy.BatchRecord) error {
	return r.store.PutBatch(ctx, configstore.Batch{Provider: b.Provider, ID: b.ID, UserPath: b.UserPath, KeyID: b.KeyID, Tags: b.Tags, SubmittedAt: b.SubmittedAt})
}

// batchesPerRun bounds the batches one reconciler run looks at.
const batchesPerRun = 50

// BatchReport is what one look at the pending batches did.
type BatchReport struct {
	Pending, Ended, Charged int
}

// ChargeEndedBatches polls the pending batches and charges those that
// ended. Charging is exactly once per batch and model, so a run that
// stops half-way is finished by the next.
func (a *App) ChargeEndedBatches(ctx context.Context) (BatchReport, error) {
	var rep BatchReport
	bs, ok := a.ConfigStore.(batchStore)
	if !ok {
		return rep, nil
	}
	pending, err := bs.PendingBatches(ctx, batchesPerRun)
	if err != nil {
		return rep, err
	}
	rep.Pending = len(pending)
	if len(pending) == 0 {
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
	prices := a.Config.PriceTable()
	var errs []error
	for _, b := range pending {
		p, found := a.Catalog.Provider(b.Provider)
		poller, polls := p.(providers.BatchPoller)
		if !found || !polls {
			a.Log.Error("a recorded batch's provider cannot be polled; forgetting it uncharged", "provider", b.Provider, "batch", b.ID)
			errs = append(errs, bs.FinishBatch(ctx, b))
			continue
		}
		out, err := poller.PollBatch(ctx, b.ID)
		if err != nil {
			errs = append(errs, fmt.Errorf("batch %s at %s: %w", b.ID, b.Provider, err))
			continue
		}
		if !out.Done {
			continue
		}
		rep.Ended++
		charged := true
		for model, u := range out.Usage {
			list, _ := prices.Lookup(b.Provider, model)
			price := pricing.Batch(list)
			s := limiter.Subject{UserPath: b.UserPath, Provider: b.Provider, Model: model, Key: b.KeyID, Tags: b.Tags}
			used := limiter.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CachedInputTokens: u.CachedInputTokens, CachedInInput: u.CachedInInput}
			applied, err := a.Limiter.Bill(ctx, a.Clock(), batchChargeID(b, model), s, used, price)
			if err != nil {
				errs = append(errs, fmt.Errorf("charging batch %s: %w", b.ID, err))
				charged = false
				break
			}
			a.Log.Info("batch charged", "provider", b.Provider, "batch", b.ID, "status", out.Status, "user_path", b.UserPath,
				"model", model, "input_tokens", u.InputTokens, "output_tokens", u.OutputTokens,
				"cost_usd", limiter.FormatUSD(price.Cost(used)), "applied_now", applied)
		}
		if charged {
			rep.Charged++
			errs = append(errs, bs.FinishBatch(ctx, b))
		}
	}
	return rep, errors.Join(errs...)
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
	TakeSession(ctx context.Context, id string) (configstore.Session, error)
}

// sessions adapts the config store to the gateway.
type sessions struct{ store sessionStore }

func (s sessions) PutSession(ctx context.Context, r proxy.SessionRecord) error {
	return s.store.PutSession(ctx, configstore.Session{Provider: r.Provider, ID: r.ID, UserPath: r.UserPath, Lease: r.Lease})
}

func (s sessions) TakeSession(ctx context.Context, id string) (proxy.SessionRecord, error) {
	got, err := s.store.TakeSession(ctx, id)
	if errors.Is(err, configstore.ErrNotFound) {
		return proxy.SessionRecord{}, proxy.ErrUnknownSession
	}
	return proxy.SessionRecord{Provider: got.Provider, ID: got.ID, UserPath: got.UserPath, Lease: got.Lease}, err
}
