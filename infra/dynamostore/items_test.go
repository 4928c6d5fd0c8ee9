package dynamostore

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tollgate/tollgate/limiter"
)

func TestCounterKeyRoundTrip(t *testing.T) {
	for _, c := range []limiter.Counter{
		{Rule: "user_path:/team/alpha:60", Kind: limiter.KindRequests, Window: 29523456},
		{Rule: "user_path:/c:60@g7", Child: "alice|bob", Kind: limiter.KindTokens, Window: -3, Shard: 2},
		{Rule: "a|b:1", Child: "", Kind: limiter.KindInFlight},
		{Rule: "", Child: "x", Kind: limiter.KindOutputTokens, Window: 1},
		{Rule: "model:openai/gpt-4o:3600", Kind: limiter.KindInputTokens, Window: 493000, Shard: 63},
	} {
		key := CounterKey(c)
		got, err := ParseCounterKey(key)
		if err != nil || got != c {
			t.Errorf("ParseCounterKey(%q) = %+v, %v; want %+v", key, got, err, c)
		}
	}
	// Distinct counters never share a key, however their strings are made.
	a := CounterKey(limiter.Counter{Rule: "x|req|1|0|", Kind: limiter.KindRequests})
	b := CounterKey(limiter.Counter{Rule: "x", Kind: limiter.KindRequests, Window: 1, Child: "req|1|0|"})
	if a == b {
		t.Fatalf("two counters share the key %q", a)
	}
	for _, bad := range []string{"", "x", "3:ab", "1:a|req|1|0", "1:a|nope|1|0|", "1:a|req|x|0|", "-1:|req|1|0|"} {
		if _, err := ParseCounterKey(bad); err == nil {
			t.Errorf("ParseCounterKey(%q) accepted", bad)
		}
	}
}

func TestLeaseItemRoundTripAndSize(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	w := now.UnixNano() / int64(time.Minute)
	l := &limiter.Lease{
		ID: "0123456789abcdef0123456789abcdef.0", ExpiresAt: now.Add(15 * time.Minute),
		UserPath: "/customers/acme-corporation/production/app", Provider: "openai-eu", Model: "gpt-4o-2024-08-06", Route: "chat",
		Reserved: limiter.Usage{InputTokens: 1200, OutputTokens: 4096},
		Charges: []limiter.Charge{
			{Counter: limiter.Counter{Rule: "user_path:/customers:60@g1", Child: "acme-corporation", Kind: limiter.KindRequests, Window: w}, Period: time.Minute, Amount: 1},
			{Counter: limiter.Counter{Rule: "user_path:/customers:60@g1", Child: "acme-corporation", Kind: limiter.KindTokens, Window: w}, Period: time.Minute, Amount: 5296},
			{Counter: limiter.Counter{Rule: "user_path:/customers/acme-corporation:c", Kind: limiter.KindInFlight}, Amount: 1},
			{Counter: limiter.Counter{Rule: "provider:openai-eu:60", Kind: limiter.KindRequests, Window: w, Shard: 3}, Period: time.Minute, Amount: 1},
			{Counter: limiter.Counter{Rule: "model:openai-eu/gpt-4o-2024-08-06:60", Kind: limiter.KindInputTokens, Window: w}, Period: time.Minute, Amount: 1200},
			{Counter: limiter.Counter{Rule: "model:openai-eu/gpt-4o-2024-08-06:60", Kind: limiter.KindOutputTokens, Window: w}, Period: time.Minute, Amount: 4096},
			{Counter: limiter.Counter{Rule: "user_path:/customers:$month", Kind: limiter.KindCost, Window: 1777593600}, Period: 31 * 24 * time.Hour,
				Shape: limiter.ShapeFixed, End: time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC), Amount: 44_000},
			{Counter: limiter.Counter{Rule: "provider:openai-eu:b", Kind: limiter.KindTokens}, Period: 600 * time.Second,
				Shape: limiter.ShapeBucket, Unit: 333_334, Amount: 5296 * 333_334},
		},
		Price: limiter.Price{Input: 2_500_000, Output: 10_000_000, CachedInput: 1_250_000},
	}
	used := limiter.Usage{InputTokens: 1180, OutputTokens: 3900, CachedInputTokens: 1024, CacheWriteInputTokens: 100, Exact: true}
	item := completionItem(l, now.Add(time.Minute), used, false, false, now.Unix())
	rec, err := DecodeLease(item)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != StatusCompleted || rec.Used != used || rec.Released || rec.Lease.ID != l.ID || !rec.Lease.ExpiresAt.Equal(l.ExpiresAt) ||
		rec.Lease.UserPath != l.UserPath || rec.Lease.Reserved != l.Reserved || len(rec.Lease.Charges) != len(l.Charges) ||
		rec.Lease.Price != l.Price {
		t.Fatalf("decoded %+v", rec)
	}
	for i, c := range rec.Lease.Charges {
		w := l.Charges[i]
		if c.Counter != w.Counter || c.Period != w.Period || c.Amount != w.Amount || c.Shape != w.Shape || !c.End.Equal(w.End) || c.Unit != w.Unit {
			t.Errorf("charge %d decoded %+v, want %+v", i, c, w)
		}
	}
	// One write unit: a lease of eight counters, with its usage, stays
	// under 1 KB.
	if size := itemSize(item); size > 1024 {
		t.Fatalf("lease record is %d bytes, over one write unit", size)
	}
}

// itemSize approximates DynamoDB's item size: names plus values.
func itemSize(item map[string]types.AttributeValue) int {
	n := 0
	for k, v := range item {
		n += len(k) + valueSize(v)
	}
	return n
}

func valueSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		return len(v.Value)/2 + 1
	case *types.AttributeValueMemberBOOL:
		return 1
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberBS:
		n := 0
		for _, e := range v.Value {
			n += len(e)
		}
		return n
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range v.Value {
			n += 1 + valueSize(e)
		}
		return n
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range v.Value {
			n += 1 + len(k) + valueSize(e)
		}
		return n
	}
	return 0
}

// A window counter's item, with every writer slot taken, its largest
// count, reservation and TTL, stays one write unit (1 KB) for keys up to
// the longest a user path makes; keys too long for even the fewest slots
// are past any key tollgate writes.
func TestCounterItemStaysUnderOneKB(t *testing.T) {
	for _, keyLen := range []int{40, 200, 600, 800} {
		pk := string(make([]byte, keyLen))
		item := map[string]types.AttributeValue{
			attrPK: sv(pk), attrN: n(limiter.MaxAmount), attrReserved: n(limiter.MaxAmount), attrTTL: n(1 << 40),
		}
		slots := writerSlots(pk)
		for i := range slots {
			item[attrWriter+itoa(i)] = bin(make([]byte, tokenBytes))
		}
		if size := itemSize(item); size > 1024 {
			t.Errorf("a counter with a %d-byte key and all %d writer slots is %d bytes, over one write unit", keyLen, slots, size)
		}
		if keyLen <= 200 && slots != maxWriterSlots {
			t.Errorf("a %d-byte key has %d writer slots, want %d", keyLen, slots, maxWriterSlots)
		}
	}
	tok := writeToken()
	if got := writerSlot("k", tok); got != writerSlot("k", tok) || len(tok) != tokenBytes {
		t.Fatal("a token's slot must not change")
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// A gauge's item weighs 9 bytes a slot held: a concurrency rule of 50 at
// its limit is one write unit, one of 200 two, for keys up to the longest
// a user path makes here (a per_child rule under a long path).
func TestGaugeItemSize(t *testing.T) {
	key := gaugeKey(CounterKey(limiter.Counter{Rule: "user_path:/customers/acme-corporation/production:c@g12", Child: "some-long-child-name", Kind: limiter.KindInFlight}))
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct{ slots, units int }{{35, 1}, {50, 1}, {100, 1}, {200, 2}} {
		entries := make([][]byte, c.slots)
		for i := range entries {
			entries[i] = newEntry("0123456789abcdef.0."+itoa(i), now.Add(15*time.Minute))
		}
		item := map[string]types.AttributeValue{attrPK: sv(key), attrSlotSet: bs(entries...), attrTTL: n(now.Add(48 * time.Hour).Unix())}
		if units := (itemSize(item) + 1023) / 1024; units > c.units {
			t.Errorf("a gauge holding %d slots is %d bytes, %d write units; want %d", c.slots, itemSize(item), units, c.units)
		}
	}
}

// A slot entry names its lease and carries its expiry, rounded up to the
// second, so it is held to the end of that second and no less; leases
// outside what 4 bytes of seconds hold are clamped, never wrapped.
func TestSlotEntry(t *testing.T) {
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, step := range []struct {
		exp, now time.Time
		expired  bool
	}{
		{at, at.Add(-time.Nanosecond), false},
		{at, at, true},
		{at.Add(time.Millisecond), at.Add(999 * time.Millisecond), false},
		{at.Add(time.Millisecond), at.Add(time.Second), true},
		{time.Unix(1<<40, 0), time.Unix(math.MaxUint32-1, 0), false}, // far future: clamped to 2106
		{time.Unix(-5, 0), time.Unix(0, 0), true},                    // before 1970: clamped to 1970
	} {
		e := newEntry("lease-1", step.exp)
		if len(e) != entryBytes || entryExpired(e, step.now) != step.expired {
			t.Errorf("entry expiring %v at %v: expired %v, want %v", step.exp, step.now, entryExpired(e, step.now), step.expired)
		}
		if !sameTag(e, leaseTag("lease-1")) || sameTag(e, leaseTag("lease-2")) {
			t.Error("an entry's tag does not name its lease")
		}
	}
	if !entryExpired([]byte("not ours"), at) {
		t.Error("an entry of another shape counts as held")
	}
}

// A charge at Bedrock's arithmetic keeps its output burndown in the lease
// record, the one thing its settlement needs beyond the standard charge;
// a record without one decodes as the standard arithmetic.
func TestBedrockChargeRoundTrip(t *testing.T) {
	w := int64(29_523_456)
	for _, c := range []limiter.Charge{
		{Counter: limiter.Counter{Rule: "model:bedrock/us.anthropic.claude-sonnet-4-5:60", Kind: limiter.KindTokens, Window: w}, Period: time.Minute, Amount: 5100, Burndown: 5},
		{Counter: limiter.Counter{Rule: "provider:bedrock:60", Kind: limiter.KindTokens, Window: w, Shard: 1, Shards: 4}, Period: time.Minute, Amount: 2000, Burndown: 1},
		{Counter: limiter.Counter{Rule: "provider:bedrock:60", Kind: limiter.KindTokens, Window: w}, Period: time.Minute,
			Shape: limiter.ShapeFixed, End: time.Unix((w+1)*60, 0).UTC(), Amount: 5100, Burndown: 5},
		{Counter: limiter.Counter{Rule: "provider:bedrock:60", Kind: limiter.KindTokens, Window: w}, Period: time.Minute, Amount: 1100},
	} {
		got, err := decodeCharge(sv(encodeCharge(&c)))
		if err != nil || got.Counter != c.Counter || got.Amount != c.Amount || got.Burndown != c.Burndown || got.Shape != c.Shape || !got.End.Equal(c.End) {
			t.Errorf("%q decoded %+v, %v; want %+v", encodeCharge(&c), got, err, c)
		}
	}
	key := CounterKey(limiter.Counter{Rule: "provider:bedrock:60", Kind: limiter.KindTokens, Window: w})
	for _, bad := range []string{"5100 60x " + key, "5100 60x0 " + key, "5100 60x101 " + key, "5100 60x-5 " + key, "5100 x5 " + key} {
		if c, err := decodeCharge(sv(bad)); err == nil {
			t.Errorf("decodeCharge(%q) accepted: %+v", bad, c)
		}
	}
	rec, err := DecodeLease(map[string]types.AttributeValue{attrID: sv("l1"), attrUsedIn: n(60), attrUsedWrite: n(10), attrExact: b(true)})
	if err != nil || rec.Used.CacheWriteInputTokens != 10 || rec.Used.InputTokens != 60 {
		t.Fatalf("cache writes decoded %+v, %v", rec.Used, err)
	}
}
