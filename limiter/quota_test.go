package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/infra/memstore"
	"github.com/tollgate/tollgate/limiter"
)

const claude = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"

// bedrockRule is a Claude model rule at Bedrock's quota: 60,000 tokens a
// minute.
func bedrockRule() limiter.Rule {
	return limiter.Rule{Scope: limiter.ScopeModel, Subject: "bedrock/" + claude, Limit: limiter.Window{Period: limiter.Minute, MaxTokens: 60_000, Quota: limiter.QuotaBedrock}}
}

func bedrockRequest(id string) limiter.Request {
	return limiter.Request{ID: id, Subject: limiter.Subject{UserPath: "/team/app", Provider: "bedrock", Model: claude},
		InputTokens: 100, OutputTokens: 1000, OutputBurndown: 5}
}

// tokensOf returns what a rule's token window holds now.
func tokensOf(t *testing.T, l *limiter.Limiter, now time.Time, scope limiter.Scope) int64 {
	t.Helper()
	us, err := l.AllUsage(context.Background(), now)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range us {
		if u.Rule.Scope != scope {
			continue
		}
		for _, d := range u.Dimensions {
			if d.Kind == limiter.KindTokens {
				return d.Used
			}
		}
	}
	t.Fatalf("no %s token window", scope)
	return 0
}

// Bedrock's arithmetic on a Claude model rule of 60,000 tokens a minute: a
// request of a 100-token prompt and max_tokens 1000 is charged 100 + 1000
// × 5 = 5,100, so 11 fit and the 12th is refused here, before Bedrock
// would throttle it. A user-path rule charged by the same requests keeps
// the standard 1,100. Settled to answers of 200 output tokens, the rule
// holds 100 + 200 × 5 = 1,100 per request; settling again changes
// nothing.
func TestBedrockQuotaChargesAndSettles(t *testing.T) {
	store := memstore.New()
	rs, err := limiter.NewRules([]limiter.Rule{bedrockRule(), userRule("/team", limiter.Minute, 0, 1_000_000)})
	if err != nil {
		t.Fatal(err)
	}
	l, _ := limiter.New(limiter.Config{Store: store, Rules: rs})
	now := t0.Add(10 * time.Second)
	var leases []*limiter.Lease
	for i := range 11 {
		d := admit(t, l, now, bedrockRequest("b"+string(rune('a'+i))))
		if !d.Allowed {
			t.Fatalf("request %d refused: %s", i+1, d.Refused.Message())
		}
		leases = append(leases, d.Lease)
	}
	if got := tokensOf(t, l, now, limiter.ScopeModel); got != 11*5_100 {
		t.Fatalf("the Bedrock rule holds %d, want 11 × 5,100", got)
	}
	if got := tokensOf(t, l, now, limiter.ScopeUserPath); got != 11*1_100 {
		t.Fatalf("the standard rule holds %d, want 11 × 1,100", got)
	}
	d := admit(t, l, now, bedrockRequest("b12"))
	if d.Allowed || d.Refused.Rule.Scope != limiter.ScopeModel || d.Refused.Kind != limiter.KindTokens || d.Refused.Amount != 5_100 || d.Refused.Burndown != 5 {
		t.Fatalf("12th request: %+v, want the model rule's token refusal of 5,100", d.Refused)
	}

	used := limiter.Usage{InputTokens: 100, OutputTokens: 200, Exact: true}
	var ss []limiter.Settlement
	for _, ls := range leases {
		if err := store.Complete(context.Background(), now, ls, used); err != nil {
			t.Fatal(err)
		}
		ss = append(ss, limiter.Settlement{Lease: ls, Used: used})
	}
	for range 2 {
		if _, err := store.Settle(context.Background(), ss); err != nil {
			t.Fatal(err)
		}
	}
	if got := tokensOf(t, l, now, limiter.ScopeModel); got != 11*1_100 {
		t.Fatalf("settled, the Bedrock rule holds %d, want 11 × (100 + 200 × 5)", got)
	}
	if got := tokensOf(t, l, now, limiter.ScopeUserPath); got != 11*300 {
		t.Fatalf("settled, the standard rule holds %d, want 11 × 300", got)
	}
	// 47,900 left in the window: 9 more requests of 5,100, not 10.
	for i := range 10 {
		d := admit(t, l, now, bedrockRequest("c"+string(rune('a'+i))))
		if d.Allowed != (i < 9) {
			t.Fatalf("after settlement, request %d: allowed %v", i+1, d.Allowed)
		}
	}
}

// Settlement gives cache reads back, however the provider counts them,
// and keeps cache writes, which are input.
func TestBedrockQuotaReleasesCacheReads(t *testing.T) {
	for _, tc := range []struct {
		name string
		used limiter.Usage
		want int64
	}{
		// Bedrock and Anthropic count reads apart: 60 input (10 of them
		// written to the cache) and 40 read from it.
		{"reads apart", limiter.Usage{InputTokens: 60, CacheWriteInputTokens: 10, CachedInputTokens: 40, OutputTokens: 200, Exact: true}, 60 + 1000},
		// OpenAI counts reads in the input: 100 of which 40 were read.
		{"reads in input", limiter.Usage{InputTokens: 100, CachedInputTokens: 40, CachedInInput: true, OutputTokens: 200, Exact: true}, 60 + 1000},
		// A broken stream never refunds: the 5,100 stay.
		{"inexact", limiter.Usage{InputTokens: 60, CachedInputTokens: 40, OutputTokens: 20}, 5_100},
		// Past the reservation is charged, past the limit too.
		{"overshoot", limiter.Usage{InputTokens: 100, OutputTokens: 20_000, Exact: true}, 100_100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := memstore.New()
			rs, _ := limiter.NewRules([]limiter.Rule{bedrockRule()})
			l, _ := limiter.New(limiter.Config{Store: store, Rules: rs})
			d := admit(t, l, t0, bedrockRequest("one"))
			if _, err := store.Settle(context.Background(), []limiter.Settlement{{Lease: d.Lease, Used: tc.used}}); err != nil {
				t.Fatal(err)
			}
			if got := tokensOf(t, l, t0, limiter.ScopeModel); got != tc.want {
				t.Fatalf("settled to %d, want %d", got, tc.want)
			}
		})
	}
}

// A sharded Bedrock rule: every part of a split charge carries the
// burndown, and the refund is taken from the parts, none below zero.
func TestBedrockQuotaSharded(t *testing.T) {
	r := bedrockRule()
	w := r.Limit.(limiter.Window)
	w.MaxTokens, r.Shards = 8_000, 4 // 2,000 a shard: a 5,100 charge spans three
	r.Limit = w
	store := memstore.New()
	rs, err := limiter.NewRules([]limiter.Rule{r})
	if err != nil {
		t.Fatal(err)
	}
	l, _ := limiter.New(limiter.Config{Store: store, Rules: rs})
	d := admit(t, l, t0, bedrockRequest("split"))
	if !d.Allowed || len(d.Lease.Charges) != 3 {
		t.Fatalf("admitted %v in %d parts, want 3", d.Allowed, len(d.Lease.Charges))
	}
	for _, c := range d.Lease.Charges {
		if c.Burndown != 5 {
			t.Fatalf("part %+v lacks the burndown", c.Counter)
		}
	}
	used := limiter.Usage{InputTokens: 100, OutputTokens: 200, Exact: true}
	if _, err := store.Settle(context.Background(), []limiter.Settlement{{Lease: d.Lease, Used: used}}); err != nil {
		t.Fatal(err)
	}
	if got := tokensOf(t, l, t0, limiter.ScopeModel); got != 1_100 {
		t.Fatalf("settled to %d, want 1,100", got)
	}
}

// A charge re-placed on the shards with room (its first shard was full)
// keeps the burndown it was planned with, and so settles exactly.
func TestBedrockQuotaReplacedKeepsBurndown(t *testing.T) {
	r := bedrockRule()
	w := r.Limit.(limiter.Window)
	w.MaxTokens, r.Shards = 8_000, 4
	r.Limit = w
	store := memstore.New()
	rs, _ := limiter.NewRules([]limiter.Rule{r})
	l, _ := limiter.New(limiter.Config{Store: store, Rules: rs})
	admit(t, l, t0, bedrockRequest("fill")) // 5,100 over three shards: two are full
	for i := range 40 {
		req := bedrockRequest(fmt.Sprintf("small-%d", i))
		req.OutputTokens = 100 // 100 + 100 × 5 = 600
		d := admit(t, l, t0, req)
		if !d.Allowed || !strings.HasSuffix(d.Lease.ID, "~s") {
			continue // placed on its first shard, or no room left
		}
		for _, c := range d.Lease.Charges {
			if c.Burndown != 5 {
				t.Fatalf("re-placed part %+v has burndown %d, want 5", c.Counter, c.Burndown)
			}
		}
		before := tokensOf(t, l, t0, limiter.ScopeModel)
		used := limiter.Usage{InputTokens: 100, OutputTokens: 20, Exact: true} // 100 + 20 × 5 = 200
		if _, err := store.Settle(context.Background(), []limiter.Settlement{{Lease: d.Lease, Used: used}}); err != nil {
			t.Fatal(err)
		}
		if got := tokensOf(t, l, t0, limiter.ScopeModel); got != before-400 {
			t.Fatalf("settled to %d, want %d (600 reserved, 200 used)", got, before-400)
		}
		return
	}
	t.Fatal("no request was re-placed: the test no longer reaches spread.place")
}

// Explain shows a Bedrock window's charge and the burndown it was
// computed with.
func TestBedrockQuotaExplained(t *testing.T) {
	l := newLimiter(t, bedrockRule())
	ex, err := l.Explain(context.Background(), t0, bedrockRequest("explain"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ex.Rules) != 1 || ex.Rules[0].Amount != 5_100 || ex.Rules[0].Burndown != 5 {
		t.Fatalf("explained %+v", ex.Rules)
	}
	std := newLimiter(t, limiter.Rule{Scope: limiter.ScopeModel, Subject: claude, Limit: limiter.Window{Period: limiter.Minute, MaxTokens: 60_000}})
	ex, _ = std.Explain(context.Background(), t0, bedrockRequest("explain"))
	if ex.Rules[0].Amount != 1_100 || ex.Rules[0].Burndown != 0 {
		t.Fatalf("a standard rule explained %+v", ex.Rules)
	}
}

// Amounts stay bounded: a burndown outside 1..MaxBurndown is refused, and
// the largest reservation times the largest burndown is charged as
// MaxAmount, never past it.
func TestBedrockQuotaBounds(t *testing.T) {
	l := newLimiter(t, bedrockRule())
	for _, b := range []int64{-1, limiter.MaxBurndown + 1} {
		r := bedrockRequest("bad")
		r.OutputBurndown = b
		if _, err := l.Admit(context.Background(), t0, r); !errors.Is(err, limiter.ErrInvalidAmount) {
			t.Fatalf("burndown %d: %v, want ErrInvalidAmount", b, err)
		}
	}
	r := bedrockRequest("huge")
	r.InputTokens, r.OutputTokens, r.OutputBurndown = limiter.MaxAmount, limiter.MaxAmount, limiter.MaxBurndown
	d := admit(t, l, t0, r)
	if d.Allowed || d.Refused.Amount != limiter.MaxAmount || d.Refused.Retryable {
		t.Fatalf("a huge request: %+v, want refused for good at MaxAmount", d.Refused)
	}
}

func TestBedrockQuotaProblems(t *testing.T) {
	for _, tc := range []struct {
		rule limiter.Rule
		want string
	}{
		{limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/team", Limit: limiter.Window{Period: limiter.Minute, MaxTokens: 10, Quota: limiter.QuotaBedrock}}, "only provider and model rules"},
		{limiter.Rule{Scope: limiter.ScopeProvider, Subject: "bedrock", Limit: limiter.Window{Period: limiter.Minute, MaxRequests: 10, Quota: limiter.QuotaBedrock}}, "set max_tokens"},
		{limiter.Rule{Scope: limiter.ScopeProvider, Subject: "bedrock", Limit: limiter.Window{Period: limiter.Minute, MaxTokens: 10, Quota: limiter.QuotaBedrock + 1}}, "unknown quota"},
	} {
		err := tc.rule.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.rule.Describe(), err, tc.want)
		}
	}
	// Only a window has a quota: on the other kinds a writer's quota
	// field is misplaced.
	for _, tc := range []struct {
		on   limiter.Limit
		want string
	}{
		{limiter.Gauge{}, "quota: bedrock is for token windows, not concurrency rules"},
		{limiter.Bucket{Tokens: true}, "quota: bedrock is for token windows, not buckets or budgets"},
		{limiter.Budget{}, "quota: bedrock is for token windows, not buckets or budgets"},
	} {
		errs := limiter.Misplaced(limiter.Window{Quota: limiter.QuotaBedrock}, tc.on)
		if len(errs) != 1 || errs[0].Error() != tc.want {
			t.Errorf("bedrock on %T: %v, want %q", tc.on, errs, tc.want)
		}
	}
	for _, s := range []string{"", "standard", "bedrock"} {
		q, err := limiter.ParseQuota(s)
		if err != nil || (s != "" && q.String() != s) {
			t.Errorf("ParseQuota(%q) = %v, %v", s, q, err)
		}
	}
	if _, err := limiter.ParseQuota("vertex"); err == nil {
		t.Error("an unknown quota parsed")
	}
}
