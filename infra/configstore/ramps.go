package configstore

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tollgate/tollgate/infra/awserr"
	"github.com/tollgate/tollgate/limiter"
)

// Ramps stand in items ("ramp", rule key) {level, at}, stepped by one
// conditional write that bumps the store's version, so that of the
// instances that find a step due exactly one takes it and every instance
// enforces the new level within the watcher's interval.

const pkRamp = "ramp"

// ErrRampMoved is StepRamp's answer when another instance stepped first.
var ErrRampMoved = errors.New("the ramp moved meanwhile")

// StepRamp moves the ramp of k from (its state as read) to to.
func (d *Dynamo) StepRamp(ctx context.Context, k limiter.RuleKey, from, to limiter.RampState) error {
	item := key(pkRamp, string(k))
	item["level"] = nv(to.Level)
	item["at"] = nv(to.At.UnixMilli())
	put := &types.Put{TableName: aws.String(d.table), Item: item}
	if from.Level == 0 {
		put.ConditionExpression = aws.String("attribute_not_exists(pk)")
	} else {
		put.ConditionExpression = aws.String("#l = :l AND #a = :a")
		put.ExpressionAttributeNames = map[string]string{"#l": "level", "#a": "at"}
		put.ExpressionAttributeValues = map[string]types.AttributeValue{":l": nv(from.Level), ":a": nv(from.At.UnixMilli())}
	}
	err := d.transact(ctx, []types.TransactWriteItem{{Put: put}, d.bump()})
	if conditionFailedAt(err, 0) {
		return ErrRampMoved
	}
	return awserr.Classify("step ramp", err)
}

func (d *Dynamo) ramps(ctx context.Context) (map[limiter.RuleKey]limiter.RampState, error) {
	items, err := d.query(ctx, pkRamp)
	if err != nil {
		return nil, err
	}
	out := make(map[limiter.RuleKey]limiter.RampState, len(items))
	for _, item := range items {
		out[limiter.RuleKey(getS(item, "sk"))] = limiter.RampState{Level: getN(item, "level"), At: time.UnixMilli(getN(item, "at")).UTC()}
	}
	return out, nil
}

// StepRamp moves the ramp of k from (its state as read) to to.
func (m *Memory) StepRamp(_ context.Context, k limiter.RuleKey, from, to limiter.RampState) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ramps == nil {
		m.ramps = map[limiter.RuleKey]limiter.RampState{}
	}
	if cur := m.ramps[k]; cur.Level != from.Level || !cur.At.Equal(from.At) {
		return ErrRampMoved
	}
	m.ramps[k] = to
	m.version++
	return nil
}
