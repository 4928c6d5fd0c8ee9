package configstore

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tollgate/tollgate/infra/awserr"
)

// Alerts are items ("alert", "<id>"), one per alert identity (a condition
// on a subject at a threshold), written by whichever process evaluates
// alerts. Firing is one conditional PutItem: it succeeds for one writer
// per identity and period, however many processes evaluate the same
// numbers at once, and that writer is the one that delivers the alert
// (TestAlertsFireOncePerPeriod, in both stores). Resolving is one
// conditional UpdateItem, so a resolution is delivered once too. TTL
// removes an alert 30 days after it resolved.

// Alert is one alert's fleet-wide state.
type Alert struct {
	// ID is the alert's identity: the same condition on the same subject
	// at the same threshold is the same alert from one period to the next.
	ID string
	// Period names the period it last fired in: it fires at most once per
	// period, and again in a later one only after it resolved.
	Period              string
	Active              bool
	FiredAt, ResolvedAt time.Time
	// Doc is the alert as it was last delivered (JSON), for listing.
	Doc json.RawMessage
}

const pkAlert = "alert"

// alertRetention is how long a resolved alert stays listed; a firing one
// stays while it fires (its TTL is pushed past its next evaluation).
const (
	alertRetention = 30 * 24 * time.Hour
	activeTTL      = 90 * 24 * time.Hour
)

// FireAlert records a as firing in its period. It reports whether this
// call fired it: false when it is firing already, or fired in a.Period
// before (and resolved since).
func (d *Dynamo) FireAlert(ctx context.Context, a Alert) (bool, error) {
	item := key(pkAlert, a.ID)
	item["period"] = sv(a.Period)
	item["active"] = bv(true)
	item["fired_at"] = nv(a.FiredAt.UnixMilli())
	item["doc"] = sv(string(a.Doc))
	item["ttl"] = nv(a.FiredAt.Add(activeTTL).Unix())
	_, err := d.api.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                 aws.String(d.table),
		Item:                      item,
		ConditionExpression:       aws.String("attribute_not_exists(pk) OR (active = :f AND period <> :p)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":f": bv(false), ":p": sv(a.Period)},
	})
	if awserr.IsConditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, awserr.Classify("fire alert", err)
	}
	return true, nil
}

// ResolveAlert marks the alert id resolved at, with doc as its last
// state; it returns the alert as it was and whether this call resolved it
// (false: it was not firing).
func (d *Dynamo) ResolveAlert(ctx context.Context, id string, at time.Time, doc json.RawMessage) (Alert, bool, error) {
	out, err := d.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(d.table),
		Key:                       key(pkAlert, id),
		UpdateExpression:          aws.String("SET active = :f, resolved_at = :r, doc = :d, #t = :t"),
		ConditionExpression:       aws.String("active = :true"),
		ExpressionAttributeNames:  map[string]string{"#t": "ttl"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":f": bv(false), ":true": bv(true), ":r": nv(at.UnixMilli()), ":d": sv(string(doc)), ":t": nv(at.Add(alertRetention).Unix())},
		ReturnValues:              types.ReturnValueAllOld,
	})
	if awserr.IsConditionFailed(err) {
		return Alert{}, false, nil
	}
	if err != nil {
		return Alert{}, false, awserr.Classify("resolve alert", err)
	}
	return decodeAlert(out.Attributes), true, nil
}

// Alerts lists every alert kept: firing, and resolved within 30 days.
func (d *Dynamo) Alerts(ctx context.Context) ([]Alert, error) {
	items, err := d.query(ctx, pkAlert)
	if err != nil {
		return nil, err
	}
	out := make([]Alert, 0, len(items))
	for _, item := range items {
		out = append(out, decodeAlert(item))
	}
	sortAlerts(out)
	return out, nil
}

func decodeAlert(item map[string]types.AttributeValue) Alert {
	a := Alert{ID: getS(item, "sk"), Period: getS(item, "period"), Active: getB(item, "active"),
		FiredAt: time.UnixMilli(getN(item, "fired_at")).UTC(), Doc: json.RawMessage(getS(item, "doc"))}
	if ms := getN(item, "resolved_at"); ms != 0 && !a.Active {
		a.ResolvedAt = time.UnixMilli(ms).UTC()
	}
	return a
}

// sortAlerts puts firing alerts first, then the latest fired.
func sortAlerts(as []Alert) {
	slices.SortFunc(as, func(a, b Alert) int {
		if a.Active != b.Active {
			if a.Active {
				return -1
			}
			return 1
		}
		if c := b.FiredAt.Compare(a.FiredAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// FireAlert records a as firing in its period; see Dynamo.FireAlert.
func (m *Memory) FireAlert(_ context.Context, a Alert) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.alerts == nil {
		m.alerts = map[string]Alert{}
	}
	if cur, ok := m.alerts[a.ID]; ok && (cur.Active || cur.Period == a.Period) {
		return false, nil
	}
	a.Active, a.ResolvedAt = true, time.Time{}
	m.alerts[a.ID] = a
	return true, nil
}

// ResolveAlert marks the alert id resolved; see Dynamo.ResolveAlert.
func (m *Memory) ResolveAlert(_ context.Context, id string, at time.Time, doc json.RawMessage) (Alert, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.alerts[id]
	if !ok || !cur.Active {
		return Alert{}, false, nil
	}
	was := cur
	cur.Active, cur.ResolvedAt, cur.Doc = false, at.UTC(), doc
	m.alerts[id] = cur
	return was, true, nil
}

// Alerts lists the alerts kept: firing, and resolved within 30 days of
// the last one resolved.
func (m *Memory) Alerts(context.Context) ([]Alert, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var newest time.Time
	for _, a := range m.alerts {
		if a.ResolvedAt.After(newest) {
			newest = a.ResolvedAt
		}
	}
	out := make([]Alert, 0, len(m.alerts))
	for id, a := range m.alerts {
		if !a.Active && a.ResolvedAt.Before(newest.Add(-alertRetention)) {
			delete(m.alerts, id) // as TTL would
			continue
		}
		out = append(out, a)
	}
	sortAlerts(out)
	return out, nil
}
