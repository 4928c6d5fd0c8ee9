package configstore

import (
	"context"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tollgate/tollgate/infra/awserr"
	"github.com/tollgate/tollgate/limiter"
)

// Batch records who submitted a batch the gateway admitted, until the
// reconciler has charged what it used: items ("batch", "<provider>/<id>").
type Batch struct {
	Provider    string
	ID          string
	UserPath    string
	KeyID       string
	Tags        []limiter.Tag
	SubmittedAt time.Time
	// Failures counts the polls of the batch that failed in a row (the
	// provider unreachable, the batch unknown to it); NextPoll is when to
	// look again after the last one.
	Failures int
	NextPoll time.Time
}

const pkBatch = "batch"

func (b Batch) sk() string { return b.Provider + "/" + b.ID }

// PutBatch records a submitted batch.
func (d *Dynamo) PutBatch(ctx context.Context, b Batch) error {
	item := key(pkBatch, b.sk())
	item["provider"] = sv(b.Provider)
	item["id"] = sv(b.ID)
	item["user_path"] = sv(b.UserPath)
	item["submitted_at"] = nv(b.SubmittedAt.UnixMilli())
	if b.KeyID != "" {
		item["key_id"] = sv(b.KeyID)
	}
	if len(b.Tags) > 0 {
		item["tags"] = sv(limiter.FormatTags(b.Tags))
	}
	_, err := d.api.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(d.table), Item: item})
	return awserr.Classify("put batch", err)
}

// PendingBatches returns up to limit batches not yet charged, in the order
// of their provider and id, from just after the one the cursor names ("":
// the first), and the cursor of the next page ("" after the last). So
// every batch is reached, however many before it never end.
func (d *Dynamo) PendingBatches(ctx context.Context, cursor string, limit int) ([]Batch, string, error) {
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(d.table),
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": sv(pkBatch)},
		ConsistentRead:            aws.Bool(true),
		Limit:                     aws.Int32(int32(limit)),
	}
	if cursor != "" {
		in.ExclusiveStartKey = key(pkBatch, cursor)
	}
	out, err := d.api.Query(ctx, in)
	if err != nil {
		return nil, "", awserr.Classify("pending batches", err)
	}
	bs := make([]Batch, 0, len(out.Items))
	for _, item := range out.Items {
		b := Batch{Provider: getS(item, "provider"), ID: getS(item, "id"), UserPath: getS(item, "user_path"), KeyID: getS(item, "key_id"),
			SubmittedAt: time.UnixMilli(getN(item, "submitted_at")).UTC(), Failures: int(getN(item, "failures"))}
		if ms := getN(item, "next_poll"); ms > 0 {
			b.NextPoll = time.UnixMilli(ms).UTC()
		}
		b.Tags, _ = limiter.ParseTags(getS(item, "tags"))
		bs = append(bs, b)
	}
	next := ""
	if len(out.LastEvaluatedKey) > 0 {
		next = getS(out.LastEvaluatedKey, "sk")
	}
	return bs, next, nil
}

// FailBatch records a failed poll of a batch: one failure more, and when
// to look again. A batch already finished is left finished.
func (d *Dynamo) FailBatch(ctx context.Context, b Batch, next time.Time) error {
	_, err := d.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(d.table),
		Key:                       key(pkBatch, b.sk()),
		UpdateExpression:          aws.String("ADD failures :one SET next_poll = :next"),
		ConditionExpression:       aws.String("attribute_exists(pk)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": nv(1), ":next": nv(next.UnixMilli())},
	})
	if awserr.IsConditionFailed(err) {
		return nil
	}
	return awserr.Classify("fail batch", err)
}

// FinishBatch forgets a charged batch.
func (d *Dynamo) FinishBatch(ctx context.Context, b Batch) error {
	_, err := d.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(d.table), Key: key(pkBatch, b.sk())})
	return awserr.Classify("finish batch", err)
}

// PutBatch records a submitted batch.
func (m *Memory) PutBatch(_ context.Context, b Batch) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.batches == nil {
		m.batches = map[string]Batch{}
	}
	b.Failures, b.NextPoll = 0, time.Time{}
	m.batches[b.sk()] = b
	return nil
}

// PendingBatches is Dynamo.PendingBatches, in the same order.
func (m *Memory) PendingBatches(_ context.Context, cursor string, limit int) ([]Batch, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	keys := make([]string, 0, len(m.batches))
	for k := range m.batches {
		if k > cursor {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	next := ""
	if len(keys) >= limit {
		// As DynamoDB does: a full page names where the next starts, even
		// when nothing is left after it.
		keys = keys[:limit]
		next = keys[limit-1]
	}
	bs := make([]Batch, len(keys))
	for i, k := range keys {
		bs[i] = m.batches[k]
	}
	return bs, next, nil
}

// FailBatch is Dynamo.FailBatch.
func (m *Memory) FailBatch(_ context.Context, b Batch, next time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.batches[b.sk()]
	if !ok {
		return nil
	}
	cur.Failures++
	cur.NextPoll = next
	m.batches[b.sk()] = cur
	return nil
}

// FinishBatch forgets a charged batch.
func (m *Memory) FinishBatch(_ context.Context, b Batch) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.batches, b.sk())
	return nil
}
