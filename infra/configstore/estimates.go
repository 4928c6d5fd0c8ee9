package configstore

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tollgate/tollgate/infra/awserr"
	"github.com/tollgate/tollgate/limiter/learn"
)

// What requests really used, for reservations that learn: a histogram of
// output tokens per route, model and key, per UTC day, in items
// ("estimate", "<day>|<route>|<model>|<key>") whose bucket counts the
// reconciler adds to (ADD, so runs and instances add up) and which TTL
// removes after a week.

// EstimateKey names what an estimate is learned for.
type EstimateKey struct {
	Route, Model, Key string
}

const pkEstimate = "estimate"

// EstimateDay names the day of t for estimates.
func EstimateDay(t time.Time) string { return t.UTC().Format("2006-01-02") }

func estimateSK(day string, k EstimateKey) string {
	return day + "|" + k.Route + "|" + strings.ToLower(k.Model) + "|" + k.Key
}

// AddEstimates adds observed histograms to the day's counts.
func (d *Dynamo) AddEstimates(ctx context.Context, day string, adds map[EstimateKey]*learn.Histogram) error {
	expires := time.Now().Add(8 * 24 * time.Hour).Unix()
	for k, h := range adds {
		var sets []string
		names := map[string]string{"#t": "ttl"}
		values := map[string]types.AttributeValue{":t": nv(expires)}
		for i, c := range h {
			if c == 0 {
				continue
			}
			n := strconv.Itoa(i)
			sets = append(sets, "#b"+n+" :b"+n)
			names["#b"+n] = "b" + n
			values[":b"+n] = nv(c)
		}
		if len(sets) == 0 {
			continue
		}
		_, err := d.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(d.table),
			Key:                       key(pkEstimate, estimateSK(day, k)),
			UpdateExpression:          aws.String("ADD " + strings.Join(sets, ", ") + " SET #t = :t"),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: values,
		})
		if err != nil {
			return awserr.Classify("add estimates", err)
		}
	}
	return nil
}

// Estimate returns the histogram of k over the days given, added up.
func (d *Dynamo) Estimate(ctx context.Context, k EstimateKey, days []string) (learn.Histogram, error) {
	var h learn.Histogram
	for _, day := range days {
		out, err := d.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(d.table), Key: key(pkEstimate, estimateSK(day, k))})
		if err != nil {
			return h, awserr.Classify("read estimates", err)
		}
		for i := range h {
			h[i] += getN(out.Item, "b"+strconv.Itoa(i))
		}
	}
	return h, nil
}

// AddEstimates adds observed histograms to the day's counts.
func (m *Memory) AddEstimates(_ context.Context, day string, adds map[EstimateKey]*learn.Histogram) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.estimates == nil {
		m.estimates = map[string]*learn.Histogram{}
	}
	for k, h := range adds {
		sk := estimateSK(day, k)
		cur := m.estimates[sk]
		if cur == nil {
			cur = &learn.Histogram{}
			m.estimates[sk] = cur
		}
		cur.Merge(h)
	}
	return nil
}

// Estimate returns the histogram of k over the days given, added up.
func (m *Memory) Estimate(_ context.Context, k EstimateKey, days []string) (learn.Histogram, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var h learn.Histogram
	for _, day := range days {
		if cur := m.estimates[estimateSK(day, k)]; cur != nil {
			h.Merge(cur)
		}
	}
	return h, nil
}
