package dynamostore

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tollgate/tollgate/infra/awserr"
	"github.com/tollgate/tollgate/limiter"
)

// A token bucket's counter is its arrival time (limiter.ShapeBucket): a
// charge sets it to max(value, now) + amount when value is at most the
// ceiling. An update expression cannot take a maximum, so there are two
// updates, one for each side of it:
//
//   - a bucket still refilling (value ≥ now) takes ADD amount, on the
//     condition now ≤ value ≤ ceiling;
//   - a full one (value < now, or no item) is SET to now + amount, on the
//     condition that it is below now.
//
// Exactly one of the two can apply to a given item, and a failed condition
// returns the item, which says which side it is on; so an admission is one
// conditional write when this process guesses the side right (it
// remembers each bucket's last value), and two when it does not.

// maxBucketTries bounds the flips between the two updates: the value
// moves below now only by a refund or a compensation, so two or three
// tries settle it.
const maxBucketTries = 4

func (s *Store) addBucket(ctx context.Context, key string, c *limiter.Charge, ceiling int64, now time.Time) addResult {
	full := true // a bucket this process has not seen is taken as full
	if v, ok := s.buckets.Get(key); ok && ceiling >= 0 {
		full = v < c.Floor
	}
	ttl := n(s.counterTTL(c, now))
	for range maxBucketTries {
		var in *dynamodb.UpdateItemInput
		if full {
			in = &dynamodb.UpdateItemInput{
				UpdateExpression:          aws.String("SET #n = :v, #t = :t, #w = :w"),
				ConditionExpression:       aws.String("attribute_not_exists(#n) OR #n < :f"),
				ExpressionAttributeNames:  map[string]string{"#n": attrN, "#t": attrTTL, "#w": attrWriter},
				ExpressionAttributeValues: map[string]types.AttributeValue{":v": n(c.Floor + c.Amount), ":f": n(c.Floor), ":t": ttl},
			}
			if ceiling < 0 {
				// Larger than the bucket: nothing admits it, but the
				// refusal returns the item, for the headers.
				in.ConditionExpression = aws.String("#n < :m")
				in.ExpressionAttributeValues[":m"] = n(-1)
				delete(in.ExpressionAttributeValues, ":f")
			}
		} else {
			in = &dynamodb.UpdateItemInput{
				UpdateExpression:          aws.String("ADD #n :a SET #t = :t, #w = :w"),
				ConditionExpression:       aws.String("#n BETWEEN :f AND :m"),
				ExpressionAttributeNames:  map[string]string{"#n": attrN, "#t": attrTTL, "#w": attrWriter},
				ExpressionAttributeValues: map[string]types.AttributeValue{":a": n(c.Amount), ":f": n(c.Floor), ":m": n(ceiling), ":t": ttl},
			}
		}
		r := s.conditionalAdd(ctx, key, in)
		switch {
		case r.err != nil, r.applied == wasApplied:
			if r.err == nil {
				s.buckets.Put(key, r.cur)
			}
			return r
		case !r.refused:
			return r
		}
		// Refused: on the other side of now, or really over the ceiling.
		s.buckets.Put(key, r.cur)
		otherSide := (full && !r.absent && r.cur >= c.Floor) || (!full && (r.absent || r.cur < c.Floor))
		if !otherSide || ceiling < 0 {
			return r
		}
		if full && r.cur > ceiling {
			return r // refilling, and over the ceiling: refused as it is
		}
		full = !full
	}
	return addResult{err: awserr.Classify("charge "+key, errors.Join(limiter.ErrContention, errors.New("token bucket kept changing sides")))}
}
