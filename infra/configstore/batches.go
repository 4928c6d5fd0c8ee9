package configstore

import (
	"context"
	"slices"
	"strings"
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

// PendingBatches returns up to limit batches not yet charged, oldest
// submitted first among those read.
func (d *Dynamo) PendingBatches(ctx context.Context, limit int) ([]Batch, error) {
	out, err := d.api.Query(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(d.table),
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": sv(pkBatch)},
		ConsistentRead:            aws.Bool(true),
		Limit:                     aws.Int32(int32(limit)),
	})
	if err != nil {
		return nil, awserr.Classify("pending batches", err)
	}
	bs := make([]Batch, 0, len(out.Items))
	for _, item := range out.Items {
		b := Batch{Provider: getS(item, "provider"), ID: getS(item, "id"), UserPath: getS(item, "user_path"), KeyID: getS(item, "key_id"),
			SubmittedAt: time.UnixMilli(getN(item, "submitted_at")).UTC()}
		b.Tags, _ = limiter.ParseTags(getS(item, "tags"))
		bs = append(bs, b)
	}
	sortBatches(bs)
	return bs, nil
}

// FinishBatch forgets a charged batch.
func (d *Dynamo) FinishBatch(ctx context.Context, b Batch) error {
	_, err := d.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(d.table), Key: key(pkBatch, b.sk())})
	return awserr.Classify("finish batch", err)
}

func sortBatches(bs []Batch) {
	slices.SortFunc(bs, func(a, b Batch) int {
		if c := a.SubmittedAt.Compare(b.SubmittedAt); c != 0 {
			return c
		}
		return strings.Compare(a.sk(), b.sk())
	})
}

// PutBatch records a submitted batch.
func (m *Memory) PutBatch(_ context.Context, b Batch) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.batches == nil {
		m.batches = map[string]Batch{}
	}
	m.batches[b.sk()] = b
	return nil
}

// PendingBatches returns up to limit batches not yet charged.
func (m *Memory) PendingBatches(_ context.Context, limit int) ([]Batch, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	bs := make([]Batch, 0, len(m.batches))
	for _, b := range m.batches {
		bs = append(bs, b)
	}
	sortBatches(bs)
	return bs[:min(len(bs), limit)], nil
}

// FinishBatch forgets a charged batch.
func (m *Memory) FinishBatch(_ context.Context, b Batch) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.batches, b.sk())
	return nil
}
