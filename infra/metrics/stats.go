package metrics

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"time"
)

// StatsStore keeps the dashboard's and the review report's counts where
// every instance adds to them and reads them: one item per kind and
// period (a minute, or an hour for the report's kinds), kept for
// StatsRetention(kind).
type StatsStore interface {
	// AddMinuteStats adds counts to kind's item of the period starting at
	// at (a minute's start, or an hour's for hourly kinds).
	AddMinuteStats(ctx context.Context, kind string, at time.Time, counts map[string]float64) error
	// SetStats sets values in kind's item of the period starting at at;
	// the last writer wins (for samples that every writer takes alike).
	SetStats(ctx context.Context, kind string, at time.Time, values map[string]float64) error
	// MinuteStats reads kind's items of the periods given.
	MinuteStats(ctx context.Context, kind string, minutes []time.Time) (map[time.Time]map[string]float64, error)
	// ReadStats reads the items of any kinds at once (the DynamoDB store
	// in one BatchGetItem per 100 keys); a missing item is absent.
	ReadStats(ctx context.Context, keys []StatsKey) (map[StatsKey]map[string]float64, error)
}

// StatsKey names one stats item: a kind and its period's start.
type StatsKey struct {
	Kind string
	At   time.Time
}

// The kinds of stats.
const (
	StatsRefused  = "refused"  // refusals by rule id, per minute
	StatsEstimate = "estimate" // "reserved:<route>" and "used:<route>" tokens, per minute
	// StatsOps is what the dashboard's operational questions read, per
	// minute; see the Ops* names.
	StatsOps = "ops"
	// StatsSpent samples each budget's spending (micro-dollars, by budget
	// id) each alert evaluation, per minute, for the burn-rate forecast.
	StatsSpent = "spent"
	// StatsHour is the review report's counts per rule and provider, per
	// hour: "refused:<rule>"; "reserved:<rule>|<dimension>", "used:…" and
	// "stranded:…" (tokens or micro-dollars); "admitted:<provider>",
	// "upstream429:<provider>".
	StatsHour = "hour"
	// StatsPeak is each rule's highest use an alert evaluation saw in the
	// hour (a fraction of its limit, by rule id).
	StatsPeak = "peak"
)

// Hourly reports whether kind is kept per hour rather than per minute.
func Hourly(kind string) bool { return kind == StatsHour || kind == StatsPeak }

// StatsRetention is how long kind's items are kept: a day for the
// dashboard's minutes, 40 days for the report's hours.
func StatsRetention(kind string) time.Duration {
	if Hourly(kind) {
		return 40 * 24 * time.Hour
	}
	return 24 * time.Hour
}

// PeriodOf is the start of kind's period holding t.
func PeriodOf(kind string, t time.Time) time.Time {
	if Hourly(kind) {
		return t.UTC().Truncate(time.Hour)
	}
	return t.UTC().Truncate(time.Minute)
}

// The names of StatsOps, each "<name>:<what>": the dashboard's answers to
// seed 001's questions. Outcomes are "<outcome>.class:<class>" and
// "<outcome>.model:<model>", so that an outcome the gateway gains later
// (OutcomeFallback, OutcomeDowngraded) is one more prefix, read and shown
// like the others.
const (
	OpsRequests      = "req"         // requests completed, by user path
	OpsInputTokens   = "in"          // input tokens used, by user path
	OpsOutputTokens  = "out"         // output tokens used, by user path
	OpsCacheHeadroom = "cache"       // cache-read input tokens no limit was charged for, by provider
	OpsAdmitted      = "admitted"    // admissions, by provider
	OpsUpstream429   = "upstream429" // upstream 429s after admission, by provider
	OpsBottleneck    = "bottleneck"  // refusals by provider and model rules, "<provider>|<rule>"
	OpsRetryLocal    = "retry.local" // Retry-After of the gateway's refusals, "<provider>|<bucket>"
	OpsRetryUpstream = "retry.upstream"
	OpsFairMember    = "fair" // units charged to fair-share members, "<rule>|<member>"
)

// Outcomes of an admission, as StatsOps counts them by class and model.
const (
	OutcomeRefused     = "refused"
	OutcomeWaited      = "waited"
	OutcomeUpstream429 = "upstream_429"
	// OutcomeFallback is an admission on a target other than the first
	// choice; OutcomeDowngraded one on a downgrade's model.
	OutcomeFallback   = "fallback"
	OutcomeDowngraded = "downgraded"
)

// RetryBuckets are the bounds of the Retry-After distribution, and
// RetryBucket the bucket of d.
var RetryBuckets = []string{"≤1s", "≤2s", "≤5s", "≤10s", "≤30s", "≤60s", ">60s"}

// RetryBucket names the bucket of a Retry-After.
func RetryBucket(d time.Duration) string {
	for i, b := range []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute} {
		if d <= b {
			return RetryBuckets[i]
		}
	}
	return RetryBuckets[len(RetryBuckets)-1]
}

// Outcome is one admission outcome the dashboard counts.
type Outcome struct {
	Kind           string // Outcome*
	Class, Model   string
	Provider, Rule string // the target's provider; the refusing rule's id
	ProviderRule   bool   // the rule is a provider or model rule (a bottleneck)
	RetryAfter     time.Duration
	HasRetryAfter  bool
}

// Completion is what one completed request used, for the dashboard and
// the report.
type Completion struct {
	UserPath, Provider        string
	InputTokens, OutputTokens int64
	// CacheHeadroom is the input served from the provider's prompt cache
	// that no limit was charged for (Anthropic counts cache reads apart
	// from its input tokens per minute).
	CacheHeadroom int64
	// Rules are what each rule charged reserved and what it used, in its
	// unit (tokens, micro-dollars); Exact says the usage was reported in
	// full.
	Rules   []RuleUse
	Members []MemberUse
	Exact   bool
}

// RuleUse is one rule's reservation and use by one request, in one
// dimension (tokens, input_tokens, output_tokens, usd).
type RuleUse struct {
	Rule, Dimension string
	Reserved, Used  int64
}

// MemberUse is what one fair-share member was charged on a rule.
type MemberUse struct {
	Rule, Member string
	Units        int64
}

// Stats is a Sink that keeps refusals by rule, per minute, in a
// StatsStore, for GET /admin/stats, and the review report's counts per
// hour: added up in process and written at most every FlushEvery (one
// write per kind and period), so a flood of refusals costs no write each.
// The first count is written at once; what comes after is written
// FlushEvery after the last write, by a timer when no later count brings
// it, so a burst that stops is not left unwritten
// (TestStatsWriteABurstThatStops).
//
// What it keeps is bounded whatever clients send: at most MaxPendingNames
// names per item between writes (the rest are counted as "<prefix>:(other)"), and
// of the names a client chooses (user paths, models, fair-share members)
// only the TopNames largest of each kind per write
// (TestStatsBoundWhatClientsChoose).
type Stats struct {
	Store      StatsStore
	Now        func() time.Time
	FlushEvery time.Duration // default 10 s

	mu       sync.Mutex
	pending  map[statsKey]map[string]float64
	flushed  time.Time
	flushing bool
	timer    *time.Timer // set while a flush is scheduled
}

// Bounds of what Stats keeps between writes.
const (
	MaxPendingNames = 2000
	TopNames        = 20
	// Other names what the bounds fold together.
	Other = "(other)"
)

type statsKey struct {
	kind   string
	minute time.Time
}

func (s *Stats) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Count implements Sink: refusals are kept by their rule, admissions and
// upstream 429s by their provider.
func (s *Stats) Count(name string, n float64, dims ...string) {
	dim := func(key string) string {
		for i := 0; i+1 < len(dims); i += 2 {
			if dims[i] == key {
				return dims[i+1]
			}
		}
		return ""
	}
	switch name {
	case Refused:
		if rule := dim("Rule"); rule != "" {
			s.Add(StatsRefused, rule, n)
			s.Add(StatsHour, "refused:"+rule, n)
		}
	case Admitted:
		if p := dim("Provider"); p != "" {
			s.Add(StatsOps, OpsAdmitted+":"+p, n)
			s.Add(StatsHour, "admitted:"+p, n)
		}
	case UpstreamRateLimited:
		if p := dim("Provider"); p != "" {
			s.Add(StatsOps, OpsUpstream429+":"+p, n)
			s.Add(StatsHour, "upstream429:"+p, n)
		}
	}
}

// Observe implements Sink; nothing observed is kept.
func (s *Stats) Observe(string, float64, string, ...string) {}

// Outcome counts an admission outcome by class and model, and a refusal's
// or an upstream 429's Retry-After by provider and by who limited.
func (s *Stats) Outcome(o Outcome) {
	if o.Class != "" {
		s.Add(StatsOps, o.Kind+".class:"+o.Class, 1)
	}
	if o.Model != "" {
		s.Add(StatsOps, o.Kind+".model:"+o.Model, 1)
	}
	if o.Provider == "" {
		return
	}
	switch o.Kind {
	case OutcomeRefused:
		if o.ProviderRule && o.Rule != "" {
			s.Add(StatsOps, OpsBottleneck+":"+o.Provider+"|"+o.Rule, 1)
		}
		if o.HasRetryAfter {
			s.Add(StatsOps, OpsRetryLocal+":"+o.Provider+"|"+RetryBucket(o.RetryAfter), 1)
		}
	case OutcomeUpstream429:
		s.Add(StatsOps, OpsBottleneck+":"+o.Provider+"|"+UpstreamBottleneck, 1)
		if o.HasRetryAfter {
			s.Add(StatsOps, OpsRetryUpstream+":"+o.Provider+"|"+RetryBucket(o.RetryAfter), 1)
		}
	}
}

// UpstreamBottleneck is the bottleneck "rule" of a provider that answered
// 429 after admission: its own limit, not one of the gateway's.
const UpstreamBottleneck = "(upstream 429)"

// Completed counts what a completed request used: by user path, the
// prompt cache's headroom by provider, fair-share members' charges, and
// per rule what it reserved against what it used (the report's estimate
// error and stranded quota).
func (s *Stats) Completed(c Completion) {
	if c.UserPath != "" {
		s.Add(StatsOps, OpsRequests+":"+c.UserPath, 1)
		s.Add(StatsOps, OpsInputTokens+":"+c.UserPath, float64(c.InputTokens))
		s.Add(StatsOps, OpsOutputTokens+":"+c.UserPath, float64(c.OutputTokens))
	}
	if c.CacheHeadroom > 0 && c.Provider != "" {
		s.Add(StatsOps, OpsCacheHeadroom+":"+c.Provider, float64(c.CacheHeadroom))
	}
	for _, m := range c.Members {
		s.Add(StatsOps, OpsFairMember+":"+m.Rule+"|"+m.Member, float64(m.Units))
	}
	for _, r := range c.Rules {
		name := r.Rule + "|" + r.Dimension
		s.Add(StatsHour, "reserved:"+name, float64(r.Reserved))
		s.Add(StatsHour, "used:"+name, float64(r.Used))
		if r.Reserved > r.Used {
			s.Add(StatsHour, "stranded:"+name, float64(r.Reserved-r.Used))
		}
	}
}

// chosen are the StatsOps names whose second part a client chooses: only
// the TopNames largest of each are written.
var chosen = []string{OpsRequests + ":", OpsInputTokens + ":", OpsOutputTokens + ":", OpsFairMember + ":",
	OutcomeRefused + ".model:", OutcomeWaited + ".model:", OutcomeUpstream429 + ".model:", OutcomeFallback + ".model:", OutcomeDowngraded + ".model:"}

// Add counts n more of name in kind's current period, and writes what is
// pending (in the background) when FlushEvery has passed since the last
// write, or schedules that write.
func (s *Stats) Add(kind, name string, n float64) {
	now := s.now()
	k := statsKey{kind, PeriodOf(kind, now)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == nil {
		s.pending = map[statsKey]map[string]float64{}
	}
	if s.pending[k] == nil {
		s.pending[k] = map[string]float64{}
	}
	p := s.pending[k]
	if _, ok := p[name]; !ok && len(p) >= MaxPendingNames {
		prefix, _, _ := strings.Cut(name, ":")
		name = prefix + ":" + Other
	}
	p[name] += n
	s.scheduleLocked(now)
}

// Flush writes what is pending. A failed write is dropped: these are
// statistics.
func (s *Stats) Flush(ctx context.Context) {
	s.mu.Lock()
	if s.flushing {
		s.mu.Unlock()
		return
	}
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	pending := s.pending
	s.pending, s.flushing, s.flushed = map[statsKey]map[string]float64{}, true, s.now()
	s.mu.Unlock()
	for k, counts := range pending {
		if k.kind == StatsOps {
			counts = KeepTop(counts, chosen, TopNames)
		}
		_ = s.Store.AddMinuteStats(ctx, k.kind, k.minute, counts)
	}
	s.mu.Lock()
	s.flushing = false
	if len(s.pending) > 0 { // counted while writing
		s.scheduleLocked(s.now())
	}
	s.mu.Unlock()
}

// KeepTop keeps, of the names with each of the prefixes, the n with the
// largest counts (ties by name), and adds the rest into "<prefix>(other)";
// other names are kept as they are.
func KeepTop(counts map[string]float64, prefixes []string, n int) map[string]float64 {
	out := make(map[string]float64, len(counts))
	groups := map[string][]string{}
	for name, v := range counts {
		p := ""
		for _, pre := range prefixes {
			if strings.HasPrefix(name, pre) {
				p = pre
				break
			}
		}
		switch {
		case p == "":
			out[name] = v
		case name == p+Other:
			out[name] += v
		default:
			groups[p] = append(groups[p], name)
		}
	}
	for p, names := range groups {
		slices.SortFunc(names, func(a, b string) int {
			if c := cmp.Compare(counts[b], counts[a]); c != 0 {
				return c
			}
			return strings.Compare(a, b)
		})
		for i, name := range names {
			if i < n {
				out[name] += counts[name]
			} else {
				out[p+Other] += counts[name]
			}
		}
	}
	return out
}

// scheduleLocked arranges the next write of what is pending: at once when
// FlushEvery has passed since the last, else by a timer for the rest.
func (s *Stats) scheduleLocked(now time.Time) {
	if s.flushing || s.timer != nil {
		return
	}
	every := s.FlushEvery
	if every <= 0 {
		every = 10 * time.Second
	}
	wait := max(0, min(every, every-now.Sub(s.flushed)))
	s.timer = time.AfterFunc(wait, func() { s.Flush(context.Background()) })
}

// Multi sends every measurement to each sink.
type Multi []Sink

func (m Multi) Count(name string, n float64, dims ...string) {
	for _, s := range m {
		s.Count(name, n, dims...)
	}
}

func (m Multi) Observe(name string, v float64, unit string, dims ...string) {
	for _, s := range m {
		s.Observe(name, v, unit, dims...)
	}
}
