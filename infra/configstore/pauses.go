package configstore

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tollgate/tollgate/infra/awserr"
	"github.com/tollgate/tollgate/limiter"
)

// Pauses are items ("pause", "<scope>:<subject>"), written with the
// store's version bumped, so every instance sees one as it sees a rule
// change: within the watcher's interval.

const pkPause = "pause"

// PutPause sets (or replaces) the pause on its subject.
func (d *Dynamo) PutPause(ctx context.Context, p limiter.Pause) error {
	item := key(pkPause, p.Key())
	item["scope"] = sv(p.Scope.String())
	item["subject"] = sv(p.Subject)
	item["reason"] = sv(p.Reason)
	item["since"] = nv(p.Since.UnixMilli())
	if !p.Until.IsZero() {
		item["until"] = nv(p.Until.UnixMilli())
		item["ttl"] = nv(p.Until.Add(time.Hour).Unix())
	}
	err := d.transact(ctx, []types.TransactWriteItem{{Put: &types.Put{TableName: aws.String(d.table), Item: item}}, d.bump()})
	return awserr.Classify("put pause", err)
}

// DeletePause lifts the pause with key k; ErrNotFound when there is none.
func (d *Dynamo) DeletePause(ctx context.Context, k string) error {
	del := &types.Delete{TableName: aws.String(d.table), Key: key(pkPause, k), ConditionExpression: aws.String("attribute_exists(pk)")}
	err := d.transact(ctx, []types.TransactWriteItem{{Delete: del}, d.bump()})
	if conditionFailedAt(err, 0) {
		return ErrNotFound
	}
	return awserr.Classify("lift pause", err)
}

func (d *Dynamo) pauses(ctx context.Context) ([]limiter.Pause, error) {
	items, err := d.query(ctx, pkPause)
	if err != nil {
		return nil, err
	}
	ps := make([]limiter.Pause, 0, len(items))
	for _, item := range items {
		scope, err := limiter.ParseScope(getS(item, "scope"))
		if err != nil {
			continue
		}
		p := limiter.Pause{Scope: scope, Subject: getS(item, "subject"), Reason: getS(item, "reason"),
			Since: time.UnixMilli(getN(item, "since")).UTC()}
		if u := getN(item, "until"); u != 0 {
			p.Until = time.UnixMilli(u).UTC()
		}
		ps = append(ps, p)
	}
	sortPauses(ps)
	return ps, nil
}

func sortPauses(ps []limiter.Pause) {
	slices.SortFunc(ps, func(a, b limiter.Pause) int { return strings.Compare(a.Key(), b.Key()) })
}

// PutPause sets (or replaces) the pause on its subject.
func (m *Memory) PutPause(_ context.Context, p limiter.Pause) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pauses == nil {
		m.pauses = map[string]limiter.Pause{}
	}
	m.pauses[p.Key()] = p
	m.version++
	return nil
}

// DeletePause lifts the pause with key k.
func (m *Memory) DeletePause(_ context.Context, k string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.pauses[k]; !ok {
		return ErrNotFound
	}
	delete(m.pauses, k)
	m.version++
	return nil
}
