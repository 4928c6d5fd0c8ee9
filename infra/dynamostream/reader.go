// Package dynamostream reads the lease table's DynamoDB stream for the
// reconciler: through the Streams API (ListStreams, DescribeStream,
// GetShardIterator, GetRecords) from a checkpoint per shard kept in
// DynamoDB, or from the records of a Lambda stream event.
package dynamostream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/tollgate/tollgate/infra/awserr"
	"github.com/tollgate/tollgate/infra/dynamostore"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/reconcile"
)

// StreamsAPI is the part of the DynamoDB Streams client the reader calls.
type StreamsAPI interface {
	ListStreams(context.Context, *dynamodbstreams.ListStreamsInput, ...func(*dynamodbstreams.Options)) (*dynamodbstreams.ListStreamsOutput, error)
	DescribeStream(context.Context, *dynamodbstreams.DescribeStreamInput, ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error)
	GetShardIterator(context.Context, *dynamodbstreams.GetShardIteratorInput, ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error)
	GetRecords(context.Context, *dynamodbstreams.GetRecordsInput, ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error)
}

// TableAPI is the part of the DynamoDB client the reader needs: the
// checkpoints, and the lease table's description (its current stream).
type TableAPI interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DescribeTable(context.Context, *dynamodb.DescribeTableInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
}

// Options configure a Reader.
type Options struct {
	Streams StreamsAPI
	Table   TableAPI
	// TablePrefix names the tables: the stream is the leases table's, the
	// checkpoints live in the counters table.
	TablePrefix string
	Logger      *slog.Logger
}

// Reader is a reconcile.Source over the lease table's stream. Each shard
// is read in order from its checkpoint (from TRIM_HORIZON on a first
// run), a closed shard to its end before its children, and the
// checkpoint advances only when the reconciler commits a batch. When
// everything is read, Next returns nil and the reader starts over (looking
// the stream up again) on the following call.
type Reader struct {
	o      Options
	tables dynamostore.TableNames
	log    *slog.Logger

	arn    string        // the stream of this pass
	shards []types.Shard // to read this pass, parents first; nil before the pass starts
	cur    int
	iter   *string // the current shard's iterator
	seq    string  // the current shard's checkpoint
}

var _ reconcile.Source = (*Reader)(nil)

// NewReader returns a Reader.
func NewReader(o Options) (*Reader, error) {
	if o.Streams == nil || o.Table == nil {
		return nil, errors.New("dynamostream: Streams and Table clients are required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Reader{o: o, tables: dynamostore.Names(o.TablePrefix), log: o.Logger}, nil
}

// Next implements reconcile.Source.
func (rd *Reader) Next(ctx context.Context, max int) (*reconcile.Batch, error) {
	if rd.shards == nil {
		if err := rd.start(ctx); err != nil {
			return nil, err
		}
	}
	for rd.cur < len(rd.shards) {
		shard := rd.shards[rd.cur]
		if rd.iter == nil {
			done, err := rd.open(ctx, shard)
			if err != nil {
				return nil, err
			}
			if done {
				rd.advance()
				continue
			}
		}
		out, err := rd.o.Streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: rd.iter, Limit: aws.Int32(int32(min(max, 1000)))})
		if err != nil {
			switch awserr.Code(err) {
			case awserr.CodeExpiredIterator:
				rd.iter = nil // open again from the checkpoint
				continue
			case awserr.CodeTrimmedDataAccess:
				rd.log.Error("stream records past the checkpoint were trimmed before they were read; resuming at the oldest kept",
					"shard", aws.ToString(shard.ShardId), "checkpoint", rd.seq)
				rd.seq = ""
				rd.iter = nil
				if err := rd.saveCheckpoint(ctx, aws.ToString(shard.ShardId), "", false, true); err != nil {
					return nil, err
				}
				continue
			}
			return nil, awserr.Classify("get stream records", err)
		}
		closed := out.NextShardIterator == nil
		rd.iter = out.NextShardIterator
		if len(out.Records) == 0 {
			if closed {
				// Read to the end of a closed shard: mark it done so its
				// children follow.
				if err := rd.saveCheckpoint(ctx, aws.ToString(shard.ShardId), rd.seq, true, false); err != nil {
					return nil, err
				}
			}
			rd.advance()
			continue
		}
		batch, err := rd.batch(aws.ToString(shard.ShardId), out.Records, closed)
		if err != nil {
			return nil, err
		}
		if closed {
			rd.advance()
		}
		return batch, nil
	}
	rd.shards = nil // caught up: look the stream up again next time
	return nil, nil
}

func (rd *Reader) advance() {
	rd.cur++
	rd.iter = nil
	rd.seq = ""
}

// start looks the stream up and orders its shards, skipping those done.
func (rd *Reader) start(ctx context.Context) error {
	arn, err := rd.streamARN(ctx)
	if err != nil {
		return err
	}
	rd.arn = arn
	var all []types.Shard
	var from *string
	for {
		out, err := rd.o.Streams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(arn), ExclusiveStartShardId: from})
		if err != nil {
			return awserr.Classify("describe stream", err)
		}
		all = append(all, out.StreamDescription.Shards...)
		from = out.StreamDescription.LastEvaluatedShardId
		if from == nil {
			break
		}
	}
	ordered := lineageOrder(all)
	rd.shards = ordered[:0:0]
	for _, s := range ordered {
		_, done, err := rd.loadCheckpoint(ctx, aws.ToString(s.ShardId))
		if err != nil {
			return err
		}
		if !done {
			rd.shards = append(rd.shards, s)
		}
	}
	rd.cur, rd.iter, rd.seq = 0, nil, ""
	return nil
}

// streamARN finds the lease table's current stream: from the table's
// description (which IAM can grant on the table alone), else through
// ListStreams.
func (rd *Reader) streamARN(ctx context.Context) (string, error) {
	if d, err := rd.o.Table.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(rd.tables.Leases)}); err == nil &&
		d.Table != nil && aws.ToString(d.Table.LatestStreamArn) != "" {
		return aws.ToString(d.Table.LatestStreamArn), nil
	}
	out, err := rd.o.Streams.ListStreams(ctx, &dynamodbstreams.ListStreamsInput{TableName: aws.String(rd.tables.Leases)})
	if err != nil {
		return "", awserr.Classify("list streams", err)
	}
	if len(out.Streams) == 0 {
		return "", fmt.Errorf("table %s has no stream: enable NEW_AND_OLD_IMAGES", rd.tables.Leases)
	}
	// The newest stream label is the current stream.
	latest := out.Streams[0]
	for _, s := range out.Streams[1:] {
		if aws.ToString(s.StreamLabel) > aws.ToString(latest.StreamLabel) {
			latest = s
		}
	}
	return aws.ToString(latest.StreamArn), nil
}

// lineageOrder puts every shard after its parent.
func lineageOrder(shards []types.Shard) []types.Shard {
	byID := map[string]types.Shard{}
	for _, s := range shards {
		byID[aws.ToString(s.ShardId)] = s
	}
	var out []types.Shard
	placed := map[string]bool{}
	var place func(s types.Shard)
	place = func(s types.Shard) {
		id := aws.ToString(s.ShardId)
		if placed[id] {
			return
		}
		placed[id] = true
		if p, ok := byID[aws.ToString(s.ParentShardId)]; ok {
			place(p)
		}
		out = append(out, s)
	}
	// Oldest first, so siblings keep stream order.
	sorted := slices.Clone(shards)
	slices.SortFunc(sorted, func(a, b types.Shard) int {
		return strings.Compare(startSeq(a), startSeq(b))
	})
	for _, s := range sorted {
		place(s)
	}
	return out
}

func startSeq(s types.Shard) string {
	if s.SequenceNumberRange == nil {
		return ""
	}
	return padSeq(aws.ToString(s.SequenceNumberRange.StartingSequenceNumber))
}

// open gets an iterator for shard from its checkpoint. It reports done
// when the shard was finished before.
func (rd *Reader) open(ctx context.Context, shard types.Shard) (bool, error) {
	id := aws.ToString(shard.ShardId)
	seq, done, err := rd.loadCheckpoint(ctx, id)
	if err != nil || done {
		return done, err
	}
	rd.seq = seq
	in := &dynamodbstreams.GetShardIteratorInput{StreamArn: aws.String(rd.arn), ShardId: shard.ShardId}
	if seq == "" {
		in.ShardIteratorType = types.ShardIteratorTypeTrimHorizon
	} else {
		in.ShardIteratorType = types.ShardIteratorTypeAfterSequenceNumber
		in.SequenceNumber = aws.String(seq)
	}
	out, err := rd.o.Streams.GetShardIterator(ctx, in)
	if err != nil {
		if awserr.Code(err) == awserr.CodeTrimmedDataAccess {
			rd.log.Error("the checkpoint is older than the stream's retention; resuming at the oldest record kept", "shard", id)
			in.ShardIteratorType, in.SequenceNumber = types.ShardIteratorTypeTrimHorizon, nil
			rd.seq = ""
			out, err = rd.o.Streams.GetShardIterator(ctx, in)
		}
		if err != nil {
			return false, awserr.Classify("get shard iterator", err)
		}
	}
	rd.iter = out.ShardIterator
	if rd.iter == nil {
		return true, rd.saveCheckpoint(ctx, id, seq, true, false)
	}
	return false, nil
}

// batch turns stream records into changes; committing it advances the
// shard's checkpoint to the last record.
func (rd *Reader) batch(shardID string, recs []types.Record, closed bool) (*reconcile.Batch, error) {
	changes := make([]reconcile.Change, 0, len(recs))
	log := rd.tables.Leases + "|" + shardID
	for _, r := range recs {
		c, err := FromStreamRecord(r)
		if err != nil {
			rd.log.Error("skipping an undecodable stream record", "shard", shardID, "err", err)
			continue
		}
		if c.Kind == reconcile.Completed && len(r.Dynamodb.OldImage) == 0 {
			// A lease's one record, written at its completion: settled
			// once by its place in the shard. (A lease an earlier version
			// wrote at admission is settled by its marker, as then.)
			c.Position = limiter.Position{Log: log, Order: padSeq(c.ID)}
		}
		changes = append(changes, c)
	}
	last := aws.ToString(recs[len(recs)-1].Dynamodb.SequenceNumber)
	rd.seq = last
	return &reconcile.Batch{
		Changes: changes,
		Commit: func(ctx context.Context) error {
			return rd.saveCheckpoint(ctx, shardID, last, closed, false)
		},
	}, nil
}

// FromStreamRecord decodes one record read through the Streams API.
func FromStreamRecord(r types.Record) (reconcile.Change, error) {
	if r.Dynamodb == nil {
		return reconcile.Change{}, errors.New("record without a body")
	}
	c, err := dynamostore.ChangeOf(convertMap(r.Dynamodb.OldImage), convertMap(r.Dynamodb.NewImage))
	c.ID = aws.ToString(r.Dynamodb.SequenceNumber)
	if t := r.Dynamodb.ApproximateCreationDateTime; t != nil {
		c.At = *t
	}
	return c, err
}

// Checkpoints live in the counters table, one item per shard: the sequence
// number as the stream gave it (seq), and zero-padded (ord) so that a
// string comparison orders it and the checkpoint only moves forward.

const seqWidth = 40

func padSeq(seq string) string {
	if seq == "" || len(seq) >= seqWidth {
		return seq
	}
	return strings.Repeat("0", seqWidth-len(seq)) + seq
}

func (rd *Reader) checkpointKey(shardID string) map[string]dbtypes.AttributeValue {
	return map[string]dbtypes.AttributeValue{"pk": &dbtypes.AttributeValueMemberS{Value: "checkpoint|" + rd.tables.Leases + "|" + shardID}}
}

func (rd *Reader) loadCheckpoint(ctx context.Context, shardID string) (seq string, done bool, err error) {
	out, err := rd.o.Table.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(rd.tables.Counters), Key: rd.checkpointKey(shardID), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return "", false, awserr.Classify("load checkpoint", err)
	}
	if v, ok := out.Item["seq"].(*dbtypes.AttributeValueMemberS); ok {
		seq = v.Value
	}
	if v, ok := out.Item["done"].(*dbtypes.AttributeValueMemberBOOL); ok {
		done = v.Value
	}
	return seq, done, nil
}

// saveCheckpoint advances a shard's checkpoint, never backwards (another
// reconciler may have gone further), unless reset is set (after data was
// trimmed).
func (rd *Reader) saveCheckpoint(ctx context.Context, shardID, seq string, done, reset bool) error {
	in := &dynamodb.UpdateItemInput{
		TableName:                aws.String(rd.tables.Counters),
		Key:                      rd.checkpointKey(shardID),
		UpdateExpression:         aws.String("SET #s = :s, #o = :o, #d = :d, #t = :t"),
		ExpressionAttributeNames: map[string]string{"#s": "seq", "#o": "ord", "#d": "done", "#t": "ttl"},
		ExpressionAttributeValues: map[string]dbtypes.AttributeValue{
			":s": &dbtypes.AttributeValueMemberS{Value: seq},
			":o": &dbtypes.AttributeValueMemberS{Value: padSeq(seq)},
			":d": &dbtypes.AttributeValueMemberBOOL{Value: done},
			":t": &dbtypes.AttributeValueMemberN{Value: fmt.Sprint(time.Now().Add(48 * time.Hour).Unix())},
		},
	}
	if !reset {
		in.ConditionExpression = aws.String("attribute_not_exists(#o) OR #o <= :o")
	}
	_, err := rd.o.Table.UpdateItem(ctx, in)
	if awserr.IsConditionFailed(err) {
		return nil // another reconciler is ahead: fine
	}
	if err != nil {
		return awserr.Classify("save checkpoint", err)
	}
	return nil
}

// NewStreamsClient returns a DynamoDB Streams client configured as
// dynamostore.LoadAWSConfig says (AWS_ENDPOINT_URL_DYNAMODB_STREAMS names a
// local engine).
func NewStreamsClient(ctx context.Context, o dynamostore.ClientOptions) (*dynamodbstreams.Client, error) {
	cfg, err := dynamostore.LoadAWSConfig(ctx, o)
	if err != nil {
		return nil, err
	}
	return dynamodbstreams.NewFromConfig(cfg, func(so *dynamodbstreams.Options) {
		if o.HTTPClient != nil {
			so.HTTPClient = o.HTTPClient
		}
	}), nil
}
