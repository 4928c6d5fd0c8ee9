package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/tollgate/tollgate/functions/app"
	"github.com/tollgate/tollgate/infra/dynamostream"
)

// RunResult is what a scheduled run answers.
type RunResult struct {
	RecordsRead int  `json:"records_read"`
	Settled     int  `json:"settled"`
	Duplicates  int  `json:"skipped_duplicates"`
	Swept       int  `json:"expired_swept"`
	Released    int  `json:"removed_released"`
	Stopped     bool `json:"stopped_for_budget"`
	// Batches pending, and charged this run.
	BatchesPending int `json:"batches_pending"`
	BatchesCharged int `json:"batches_charged"`
	// Alerts this run fired and resolved, and whether every delivery was
	// made before it returned.
	AlertsFired     int  `json:"alerts_fired"`
	AlertsResolved  int  `json:"alerts_resolved"`
	AlertsDelivered bool `json:"alerts_delivered"`
}

// handler serves both wirings of the function. A scheduled event
// (EventBridge) runs the reconciler over the lease table's stream from its
// checkpoints, until caught up or its time budget ends. A DynamoDB stream
// event (an event source mapping on the lease table) applies its records
// and answers the ones to deliver again, by sequence number.
func handler(a *app.App) func(context.Context, json.RawMessage) (any, error) {
	return func(ctx context.Context, raw json.RawMessage) (any, error) {
		var probe struct {
			Records []struct {
				EventSource string `json:"eventSource"`
			} `json:"Records"`
		}
		_ = json.Unmarshal(raw, &probe)
		rc, err := a.NewReconciler(ctx)
		if err != nil {
			return nil, err
		}
		if len(probe.Records) > 0 && probe.Records[0].EventSource == "aws:dynamodb" {
			var e events.DynamoDBEvent
			if err := json.Unmarshal(raw, &e); err != nil {
				return nil, fmt.Errorf("stream event: %w", err)
			}
			changes, bad := dynamostream.FromEvent(e)
			for _, err := range bad {
				a.Log.Error("skipping an undecodable stream record", "err", err)
			}
			_, failed := rc.Apply(ctx, changes)
			resp := events.DynamoDBEventResponse{BatchItemFailures: []events.DynamoDBBatchItemFailure{}}
			for _, id := range failed {
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.DynamoDBBatchItemFailure{ItemIdentifier: id})
			}
			return resp, nil
		}
		rep, err := rc.Run(ctx)
		res := RunResult{
			RecordsRead: rep.Read, Settled: rep.Settled, Duplicates: rep.Duplicates,
			Swept: rep.Swept, Released: rep.Released, Stopped: rep.Stopped,
		}
		if !rep.Stopped {
			br := a.ChargeBatches(ctx)
			res.BatchesPending, res.BatchesCharged = br.Pending, br.Charged
		}
		// Alerts: evaluated once a run, their deliveries made before the
		// run returns (a frozen environment sends nothing), within the
		// function's time.
		fired, resolved := a.EvaluateAlerts(ctx, true)
		res.AlertsFired, res.AlertsResolved = len(fired), len(resolved)
		drain := ctx
		if dl, ok := ctx.Deadline(); ok {
			var cancel context.CancelFunc
			drain, cancel = context.WithDeadline(ctx, dl.Add(-2*time.Second))
			defer cancel()
		}
		res.AlertsDelivered = a.DrainAlerts(drain)
		return res, err
	}
}
