package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tollgate/tollgate/infra/awserr"
)

// The schema below is the single source of truth for tollgate's tables:
// CreateTables builds them from it, and the tests check template.yaml and
// the LocalStack init hook against it.

// TableSpec describes one table.
type TableSpec struct {
	// Suffix is appended to TOLLGATE_TABLE_PREFIX to name the table.
	Suffix       string
	HashKey      string
	RangeKey     string // "" for none
	TTLAttribute string
	// StreamView is the stream the table keeps ("" for none).
	StreamView types.StreamViewType
	Indexes    []IndexSpec
}

// IndexSpec describes a global secondary index.
type IndexSpec struct {
	Name       string
	HashKey    string
	HashType   types.ScalarAttributeType
	RangeKey   string
	RangeType  types.ScalarAttributeType
	Projection types.ProjectionType
}

// Attribute names.
const (
	attrPK        = "pk"         // counters and config: the item key
	attrSK        = "sk"         // config: the sort key
	attrN         = "n"          // counters: the count
	attrReserved  = "r"          // budgets: the part of n not yet settled
	attrWriter    = "w"          // counters: writer tokens, in slots w0, w1, … (see writerSlot)
	attrSlotSet   = "b"          // gauges: the slots held, one entry per lease (see gauge.go)
	attrTTL       = "ttl"        // every table: TTL, Unix seconds
	attrCursor    = "o"          // settlement cursors: the last place applied
	attrID        = "id"         // leases: the lease (request) id
	attrStatus    = "status"     // leases: active, completed, expired, refused
	attrExpiresAt = "expires_at" // leases: Unix milliseconds
)

// Table suffixes.
const (
	SuffixCounters = "counters"
	SuffixLeases   = "leases"
	SuffixConfig   = "config"
)

// Specs are tollgate's tables.
var Specs = []TableSpec{
	{
		// Window counters, in-flight gauges, settlement cursors and
		// markers, stream checkpoints and provider cooldowns: one item
		// each, by key.
		Suffix:       SuffixCounters,
		HashKey:      attrPK,
		TTLAttribute: attrTTL,
	},
	{
		// One item per completed request that held a slot or a
		// reservation, written at its completion. Its stream is what the
		// reconciler reads.
		Suffix:       SuffixLeases,
		HashKey:      attrID,
		TTLAttribute: attrTTL,
		StreamView:   types.StreamViewTypeNewAndOldImages,
	},
	{
		// Rules and managed keys of the admin API.
		Suffix:       SuffixConfig,
		HashKey:      attrPK,
		RangeKey:     attrSK,
		TTLAttribute: attrTTL,
	},
}

// TableNames are the names of tollgate's tables under one prefix.
type TableNames struct {
	Counters, Leases, Config string
}

// Names returns the table names under prefix.
func Names(prefix string) TableNames {
	return TableNames{
		Counters: prefix + SuffixCounters,
		Leases:   prefix + SuffixLeases,
		Config:   prefix + SuffixConfig,
	}
}

// CreateInput returns the CreateTable request of the spec under prefix.
func (t TableSpec) CreateInput(prefix string) *dynamodb.CreateTableInput {
	attrs := map[string]types.ScalarAttributeType{t.HashKey: types.ScalarAttributeTypeS}
	in := &dynamodb.CreateTableInput{
		TableName:   aws.String(prefix + t.Suffix),
		BillingMode: types.BillingModePayPerRequest,
		KeySchema:   []types.KeySchemaElement{{AttributeName: aws.String(t.HashKey), KeyType: types.KeyTypeHash}},
	}
	if t.RangeKey != "" {
		attrs[t.RangeKey] = types.ScalarAttributeTypeS
		in.KeySchema = append(in.KeySchema, types.KeySchemaElement{AttributeName: aws.String(t.RangeKey), KeyType: types.KeyTypeRange})
	}
	if t.StreamView != "" {
		in.StreamSpecification = &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: t.StreamView}
	}
	for _, ix := range t.Indexes {
		attrs[ix.HashKey] = ix.HashType
		gsi := types.GlobalSecondaryIndex{
			IndexName:  aws.String(ix.Name),
			KeySchema:  []types.KeySchemaElement{{AttributeName: aws.String(ix.HashKey), KeyType: types.KeyTypeHash}},
			Projection: &types.Projection{ProjectionType: ix.Projection},
		}
		if ix.RangeKey != "" {
			attrs[ix.RangeKey] = ix.RangeType
			gsi.KeySchema = append(gsi.KeySchema, types.KeySchemaElement{AttributeName: aws.String(ix.RangeKey), KeyType: types.KeyTypeRange})
		}
		in.GlobalSecondaryIndexes = append(in.GlobalSecondaryIndexes, gsi)
	}
	for _, name := range sortedKeys(attrs) {
		in.AttributeDefinitions = append(in.AttributeDefinitions, types.AttributeDefinition{
			AttributeName: aws.String(name), AttributeType: attrs[name],
		})
	}
	return in
}

// TableCreator is what CreateTables needs of a DynamoDB client.
type TableCreator interface {
	CreateTable(context.Context, *dynamodb.CreateTableInput, ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(context.Context, *dynamodb.DescribeTableInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	UpdateTimeToLive(context.Context, *dynamodb.UpdateTimeToLiveInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

// CreateTables creates every missing table under prefix, waits until each
// is active and turns TTL on. Tables that exist are left as they are. It is
// for local engines and tests; deployed tables come from template.yaml.
func CreateTables(ctx context.Context, api TableCreator, prefix string) error {
	for _, spec := range Specs {
		in := spec.CreateInput(prefix)
		if _, err := api.CreateTable(ctx, in); err != nil && awserr.Code(err) != awserr.CodeResourceInUse {
			return fmt.Errorf("create table %s: %w", *in.TableName, err)
		}
		if err := waitActive(ctx, api, *in.TableName); err != nil {
			return err
		}
		_, err := api.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
			TableName: in.TableName,
			TimeToLiveSpecification: &types.TimeToLiveSpecification{
				AttributeName: aws.String(spec.TTLAttribute), Enabled: aws.Bool(true),
			},
		})
		// Enabling TTL twice is refused with a validation error; that is
		// the state we want.
		if err != nil && awserr.Code(err) != "ValidationException" {
			return fmt.Errorf("enable TTL on %s: %w", *in.TableName, err)
		}
	}
	return nil
}

func waitActive(ctx context.Context, api TableCreator, name string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
		if err != nil {
			return fmt.Errorf("describe table %s: %w", name, err)
		}
		if out.Table.TableStatus == types.TableStatusActive {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("table " + name + " did not become active")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
