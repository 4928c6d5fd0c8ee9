package dynamostream

import (
	"github.com/aws/aws-lambda-go/events"
	dbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/tollgate/tollgate/infra/dynamostore"
	"github.com/tollgate/tollgate/limiter/reconcile"
)

// The Streams API, the DynamoDB API and Lambda's stream events each have
// their own attribute value types; the lease decoder reads the DynamoDB
// API's.

func convertMap(m map[string]types.AttributeValue) map[string]dbtypes.AttributeValue {
	if m == nil {
		return nil
	}
	out := make(map[string]dbtypes.AttributeValue, len(m))
	for k, v := range m {
		out[k] = convert(v)
	}
	return out
}

func convert(v types.AttributeValue) dbtypes.AttributeValue {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return &dbtypes.AttributeValueMemberS{Value: v.Value}
	case *types.AttributeValueMemberN:
		return &dbtypes.AttributeValueMemberN{Value: v.Value}
	case *types.AttributeValueMemberB:
		return &dbtypes.AttributeValueMemberB{Value: v.Value}
	case *types.AttributeValueMemberBOOL:
		return &dbtypes.AttributeValueMemberBOOL{Value: v.Value}
	case *types.AttributeValueMemberNULL:
		return &dbtypes.AttributeValueMemberNULL{Value: v.Value}
	case *types.AttributeValueMemberSS:
		return &dbtypes.AttributeValueMemberSS{Value: v.Value}
	case *types.AttributeValueMemberNS:
		return &dbtypes.AttributeValueMemberNS{Value: v.Value}
	case *types.AttributeValueMemberBS:
		return &dbtypes.AttributeValueMemberBS{Value: v.Value}
	case *types.AttributeValueMemberL:
		l := make([]dbtypes.AttributeValue, len(v.Value))
		for i, e := range v.Value {
			l[i] = convert(e)
		}
		return &dbtypes.AttributeValueMemberL{Value: l}
	case *types.AttributeValueMemberM:
		return &dbtypes.AttributeValueMemberM{Value: convertMap(v.Value)}
	}
	return &dbtypes.AttributeValueMemberNULL{Value: true}
}

func convertEventMap(m map[string]events.DynamoDBAttributeValue) map[string]dbtypes.AttributeValue {
	if m == nil {
		return nil
	}
	out := make(map[string]dbtypes.AttributeValue, len(m))
	for k, v := range m {
		out[k] = convertEvent(v)
	}
	return out
}

func convertEvent(v events.DynamoDBAttributeValue) dbtypes.AttributeValue {
	switch v.DataType() {
	case events.DataTypeString:
		return &dbtypes.AttributeValueMemberS{Value: v.String()}
	case events.DataTypeNumber:
		return &dbtypes.AttributeValueMemberN{Value: v.Number()}
	case events.DataTypeBinary:
		return &dbtypes.AttributeValueMemberB{Value: v.Binary()}
	case events.DataTypeBoolean:
		return &dbtypes.AttributeValueMemberBOOL{Value: v.Boolean()}
	case events.DataTypeStringSet:
		return &dbtypes.AttributeValueMemberSS{Value: v.StringSet()}
	case events.DataTypeNumberSet:
		return &dbtypes.AttributeValueMemberNS{Value: v.NumberSet()}
	case events.DataTypeBinarySet:
		return &dbtypes.AttributeValueMemberBS{Value: v.BinarySet()}
	case events.DataTypeList:
		l := make([]dbtypes.AttributeValue, len(v.List()))
		for i, e := range v.List() {
			l[i] = convertEvent(e)
		}
		return &dbtypes.AttributeValueMemberL{Value: l}
	case events.DataTypeMap:
		return &dbtypes.AttributeValueMemberM{Value: convertEventMap(v.Map())}
	}
	return &dbtypes.AttributeValueMemberNULL{Value: true}
}

// FromEvent decodes the records of a Lambda DynamoDB stream event (an event
// source mapping on the lease table) into changes, each with its sequence
// number as ID so a partial batch failure can name it. A record that does
// not decode is returned as an error and left out: delivering it again
// would not help. An event does not name its shard, so its completions
// carry no position: they are settled by a marker per lease.
func FromEvent(e events.DynamoDBEvent) ([]reconcile.Change, []error) {
	out := make([]reconcile.Change, 0, len(e.Records))
	var errs []error
	for _, r := range e.Records {
		c, err := dynamostore.ChangeOf(convertEventMap(r.Change.OldImage), convertEventMap(r.Change.NewImage))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c.ID = r.Change.SequenceNumber
		if !r.Change.ApproximateCreationDateTime.IsZero() {
			c.At = r.Change.ApproximateCreationDateTime.Time
		}
		out = append(out, c)
	}
	return out, errs
}
