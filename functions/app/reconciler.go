package app

import (
	"context"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/infra/dynamostore"
	"github.com/tollgate/tollgate/infra/dynamostream"
	"github.com/tollgate/tollgate/infra/memstore"
	"github.com/tollgate/tollgate/infra/metrics"
	"github.com/tollgate/tollgate/limiter/reconcile"
)

// NewReconciler returns a reconciler with a fresh source: the lease
// table's stream on DynamoDB, the embedded store's change feed in memory.
// Each scheduled run takes a new one; it reads from the stored checkpoint.
func (a *App) NewReconciler(ctx context.Context) (*reconcile.Reconciler, error) {
	cfg := reconcile.Config{Logger: a.Log, Learn: a.learn, OnRun: a.recordRun}
	switch st := a.Store.(type) {
	case *memstore.Store:
		if a.feed == nil {
			a.feed = st.Feed()
		}
		cfg.Source, cfg.Store = a.feed, st
	case *dynamostore.Store:
		if a.streams == nil {
			c, err := dynamostream.NewStreamsClient(ctx, dynamostore.ClientOptions{})
			if err != nil {
				return nil, fmt.Errorf("DynamoDB Streams client: %w", err)
			}
			a.streams = c
		}
		rd, err := dynamostream.NewReader(dynamostream.Options{
			Streams: a.streams, Table: a.Dynamo, TablePrefix: a.Config.Settings.TablePrefix, Logger: a.Log,
		})
		if err != nil {
			return nil, err
		}
		cfg.Source, cfg.Store = rd, st
	default:
		return nil, fmt.Errorf("no reconciler for store %T", a.Store)
	}
	return reconcile.New(cfg)
}

// RunReconcilerLoop runs the reconciler every TOLLGATE_RECONCILE_INTERVAL
// until ctx is done: the in-process reconciler of a local process. Each
// run may take at most one interval (and keeps a fifth of it to commit).
func (a *App) RunReconcilerLoop(ctx context.Context) {
	every := a.Config.Settings.ReconcileInterval
	a.Log.Info("reconciler running in process", "interval", every.String())
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rc, err := a.NewReconciler(ctx)
		if err != nil {
			a.Log.Error("reconciler", "err", err)
			continue
		}
		run, cancel := context.WithTimeout(ctx, every)
		_, _ = rc.Run(run) // it logs what it did
		a.ChargeBatches(run)
		cancel()
		// Alerts are evaluated here, beside the reconciler, never on a
		// request's path; their deliveries go on in the background.
		a.EvaluateAlerts(ctx, false)
	}
}

// chargeBatches charges the batches that ended, logging what failed: the
// next run tries again.
func (a *App) ChargeBatches(ctx context.Context) BatchReport {
	a.Watcher.Refresh(ctx, a.Clock())
	rep, err := a.ChargeEndedBatches(ctx)
	if err != nil {
		a.Log.Error("charging ended batches", "err", err, "pending", rep.Pending, "charged", rep.Charged)
	}
	return rep
}

// recordRun turns a reconciler run's report into metrics.
func (a *App) recordRun(rep reconcile.Report) {
	if a.Metrics == nil {
		return
	}
	a.Metrics.Count(metrics.ReconcilerRecords, float64(rep.Read))
	if rep.Read > 0 {
		a.Metrics.Observe(metrics.ReconcilerLag, float64(rep.Lag.Milliseconds()), "Milliseconds")
	}
	for route, e := range rep.Routes {
		if e.Reserved > 0 {
			a.Metrics.Observe(metrics.EstimateError, e.Ratio(), "None", "Route", route)
		}
		if a.stats != nil {
			a.stats.Add(metrics.StatsEstimate, "reserved:"+route, float64(e.Reserved))
			a.stats.Add(metrics.StatsEstimate, "used:"+route, float64(e.Used))
		}
	}
	if a.stats != nil {
		a.stats.Flush(context.Background()) // a run is rare: its numbers go at once
	}
}

// FlushStats writes the dashboard's counts this process has pending.
func (a *App) FlushStats(ctx context.Context) {
	if a.stats != nil {
		a.stats.Flush(ctx)
	}
}
