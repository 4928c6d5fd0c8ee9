package alert

import (
	"strings"
	"testing"
	"time"
)

// The month of March 2026, UTC: a budget's period.
var (
	march = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	april = time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)
)

const budget = "budget:user_path:/team/a:month"

func ids(as []Alert) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.ID
	}
	return out
}

// Use thresholds fire as use crosses them, each its own alert with the
// period it fires in; a firing alert holds until use falls a tenth below
// its threshold.
func TestUseThresholds(t *testing.T) {
	cfg := Config{Rules: []Rule{{On: budget, At: []float64{0.5, 0.8, 1.0}}}}
	at := march.Add(10 * 24 * time.Hour)
	use := func(used int64) Use {
		return Use{Rule: budget, Dimension: "usd", Used: used, Limit: 10_000_000, PeriodStart: march, PeriodEnd: april}
	}
	id := func(t float64) string { return MakeID(KindUse, budget, "usd", t) }
	for _, step := range []struct {
		used   int64
		active []string
		want   []string
	}{
		{4_999_999, nil, nil},
		{5_000_000, nil, []string{id(0.5)}},
		{7_999_999, []string{id(0.5)}, []string{id(0.5)}},
		{8_000_000, []string{id(0.5)}, []string{id(0.5), id(0.8)}},
		{10_000_000, nil, []string{id(0.5), id(0.8), id(1)}},
		// Hysteresis: 0.8 firing holds down to 72 %; not firing, it does not.
		{7_200_000, []string{id(0.8)}, []string{id(0.5), id(0.8)}},
		{7_199_999, []string{id(0.8)}, []string{id(0.5)}},
		{7_200_000, nil, []string{id(0.5)}},
	} {
		active := map[string]bool{}
		for _, a := range step.active {
			active[a] = true
		}
		got := Evaluate(cfg, Input{Now: at, Uses: []Use{use(step.used)}}, active)
		if strings.Join(ids(got), " ") != strings.Join(step.want, " ") {
			t.Errorf("used %d, active %v: %v, want %v", step.used, step.active, ids(got), step.want)
		}
		for _, a := range got {
			if a.Period != "2026-03-01T00:00:00Z" || a.PeriodEnd == nil || !a.PeriodEnd.Equal(april) || !strings.Contains(a.Message, "$") {
				t.Errorf("%s: period %q end %v message %q", a.ID, a.Period, a.PeriodEnd, a.Message)
			}
		}
	}
}

// "any" covers every rule; a window shorter than an hour fires at most
// once an hour (its period is the hour), a gauge's too.
func TestUseAnyAndPeriods(t *testing.T) {
	cfg := Config{Rules: []Rule{{On: Any, At: []float64{0.8}}, {On: "user_path:/x:minute", At: []float64{0.8, 0.9}}}}
	now := time.Date(2026, 3, 2, 10, 30, 15, 0, time.UTC)
	minute := now.Truncate(time.Minute)
	got := Evaluate(cfg, Input{Now: now, Uses: []Use{
		{Rule: "user_path:/x:minute", Dimension: "requests", Used: 95, Limit: 100, PeriodStart: minute, PeriodEnd: minute.Add(time.Minute)},
		{Rule: "user_path:/y:day", Dimension: "tokens", Used: 81, Limit: 100, PeriodStart: now.Truncate(24 * time.Hour), PeriodEnd: now.Truncate(24 * time.Hour).Add(24 * time.Hour)},
		{Rule: "provider:p:concurrent", Dimension: "in_flight", Used: 9, Limit: 10},
		{Rule: "user_path:/z:minute", Dimension: "requests", Used: 1, Limit: 100},
	}}, nil)
	want := map[string]string{
		MakeID(KindUse, "provider:p:concurrent", "in_flight", 0.8): "2026-03-02T10:00:00Z",
		MakeID(KindUse, "user_path:/x:minute", "requests", 0.8):    "2026-03-02T10:00:00Z",
		MakeID(KindUse, "user_path:/x:minute", "requests", 0.9):    "2026-03-02T10:00:00Z",
		MakeID(KindUse, "user_path:/y:day", "tokens", 0.8):         "2026-03-02T00:00:00Z",
	}
	if len(got) != len(want) {
		t.Fatalf("got %v", ids(got))
	}
	for _, a := range got {
		if p, ok := want[a.ID]; !ok || a.Period != p {
			t.Errorf("%s in period %q, want %q", a.ID, a.Period, p)
		}
	}
}

// The forecast: a budget spent at a rate that exhausts it before its
// period ends fires, with the instant; one that lasts does not. Step
// table over fixed instants.
func TestForecast(t *testing.T) {
	now := march.Add(20 * 24 * time.Hour) // 11 days left
	ago := now.Add(-ForecastWindow)
	for _, c := range []struct {
		name            string
		limit, used     int64
		earlier         Sample
		start, now, end time.Time
		fires           bool
		at              time.Time
	}{
		// $1 in 15 minutes with $10 of $100 spent: $90 lasts 22.5 h.
		{"fast spend", 100_000_000, 10_000_000, Sample{ago, 9_000_000}, march, now, april, true, now.Add(22*time.Hour + 30*time.Minute)},
		// $0.001 in 15 minutes: $90 lasts 937.5 days.
		{"slow spend", 100_000_000, 10_000_000, Sample{ago, 9_999_000}, march, now, april, false, now.Add(937*24*time.Hour + 12*time.Hour)},
		// Exactly at the end is not before it.
		{"runs out at the end", 100_000_000, 99_000_000, Sample{april.Add(-2 * time.Hour), 98_000_000}, march, april.Add(-time.Hour), april, false, april},
		{"just before the end", 100_000_000, 50_000_001, Sample{april.Add(-2 * time.Hour), 0}, march, april.Add(-time.Hour), april, true, time.Time{}},
		{"nothing spent since", 100_000_000, 10_000_000, Sample{ago, 10_000_000}, march, now, april, false, time.Time{}},
		{"already spent", 100_000_000, 100_000_000, Sample{ago, 90_000_000}, march, now, april, false, time.Time{}},
		{"sample from last month counts from the start", 100_000_000, 60_000_000, Sample{march.Add(-time.Minute), 99_000_000}, march, march.Add(12 * time.Hour), april, true, march.Add(20 * time.Hour)},
		{"no sample: from the start", 100_000_000, 60_000_000, Sample{}, march, march.Add(12 * time.Hour), april, true, march.Add(20 * time.Hour)},
		{"under a minute of data", 100_000_000, 1_000_000, Sample{}, march, march.Add(59 * time.Second), april, false, time.Time{}},
		{"past the period", 100_000_000, 1, Sample{}, march, april, april, false, time.Time{}},
		{"clock went back before the sample", 100_000_000, 20_000_000, Sample{now, 10_000_000}, march, now.Add(-time.Minute), april, false, time.Time{}},
	} {
		at, fires := Forecast(c.limit, c.used, c.earlier, c.start, c.now, c.end)
		if fires != c.fires {
			t.Errorf("%s: fires %v, want %v (at %v)", c.name, fires, c.fires, at)
		}
		if !c.at.IsZero() && !at.Equal(c.at) {
			t.Errorf("%s: runs out at %v, want %v", c.name, at, c.at)
		}
	}
	// Through Evaluate: the budget named fires with the instant; one
	// spending slowly does not.
	cfg := Config{Forecast: true}
	in := Input{Now: now, Uses: []Use{
		{Rule: budget, Dimension: "usd", Used: 10_000_000, Limit: 100_000_000, PeriodStart: march, PeriodEnd: april, Earlier: Sample{ago, 9_000_000}},
		{Rule: "budget:user_path:/slow:month", Dimension: "usd", Used: 10_000_000, Limit: 100_000_000, PeriodStart: march, PeriodEnd: april, Earlier: Sample{ago, 9_999_000}},
	}}
	got := Evaluate(cfg, in, nil)
	if len(got) != 1 || got[0].Kind != KindForecast || got[0].Subject != budget || got[0].ExhaustsAt == nil ||
		!got[0].ExhaustsAt.Equal(now.Add(22*time.Hour+30*time.Minute)) || !strings.Contains(got[0].Message, "will run out") {
		t.Fatalf("forecast alerts %+v", got)
	}
}

func minute(start time.Time, f func(m *Minute)) Minute {
	m := Minute{Start: start, Refusals: map[string]float64{}, Waits: map[string]float64{}, Admitted: map[string]float64{},
		Upstream429: map[string]float64{}, Reserved: map[string]float64{}, Used: map[string]float64{}}
	f(&m)
	return m
}

// Refusal spikes count the last complete minute; upstream 429s need
// MinAdmissions; class waits need growth and a floor; estimates are off
// either way.
func TestRates(t *testing.T) {
	now := time.Date(2026, 3, 2, 10, 30, 5, 0, time.UTC)
	m0 := now.Truncate(time.Minute)
	cfg := Config{RefusalSpike: 50, Upstream429Rate: 0.02, EstimateFactor: 2, ClassWaits: ClassWaits{Factor: 2, PerMinute: 5}}
	var ms []Minute
	for i := 1; i <= 15; i++ {
		start := m0.Add(-time.Duration(i) * time.Minute)
		ms = append(ms, minute(start, func(m *Minute) {
			if i == 1 {
				m.Refusals["user_path:/x:minute"] = 50
				m.Refusals["user_path:/y:minute"] = 49
			}
			m.Admitted["openai"], m.Admitted["few"], m.Admitted["fine"] = 100, 3, 100
			m.Upstream429["openai"], m.Upstream429["few"], m.Upstream429["fine"] = 3, 3, 1
			m.Reserved["chat"], m.Used["chat"] = 1000, 100 // 0.1: stranded
			m.Reserved["embeddings"], m.Used["embeddings"] = 1000, 1500
			m.Reserved["tiny"], m.Used["tiny"] = 10, 100
			if i <= 5 {
				m.Waits["batch"], m.Waits["interactive"], m.Waits["standard"] = 10, 10, 1
			} else {
				m.Waits["batch"], m.Waits["interactive"] = 4, 6
			}
		}))
	}
	// The minute under way does not count.
	ms = append(ms, minute(m0, func(m *Minute) { m.Refusals["user_path:/z:minute"] = 500 }))
	got := Evaluate(cfg, Input{Now: now, Minutes: ms}, nil)
	want := []string{
		MakeID(KindClassWaits, "batch", "", 2),
		MakeID(KindEstimate, "chat", "", 2),
		MakeID(KindRefusalSpike, "user_path:/x:minute", "", 50),
		MakeID(KindUpstream429, "openai", "", 0.02),
	}
	if strings.Join(ids(got), " ") != strings.Join(want, " ") {
		t.Fatalf("got %v\nwant %v", ids(got), want)
	}
	for _, a := range got {
		if a.Period != "2026-03-02T10:00:00Z" || a.Message == "" {
			t.Errorf("%s: period %q message %q", a.ID, a.Period, a.Message)
		}
	}
	// An estimate off upwards, by more than the factor, fires too.
	ms2 := []Minute{minute(m0.Add(-time.Minute), func(m *Minute) { m.Reserved["chat"], m.Used["chat"] = 1000, 2001 })}
	if got := Evaluate(Config{EstimateFactor: 2}, Input{Now: now, Minutes: ms2}, nil); len(got) != 1 || !strings.Contains(got[0].Message, "overrun") {
		t.Fatalf("underestimate: %+v", got)
	}
}

func TestProblems(t *testing.T) {
	bad := Config{Rules: []Rule{{On: "", At: nil}, {On: "nonsense", At: []float64{0, 80}}}, Upstream429Rate: 2, EstimateFactor: 0.5}
	got := strings.Join(bad.Problems(), "\n")
	for _, want := range []string{"rules[0].on", "rules[0].at", "rules[1].on", "rules[1].at[0]", "rules[1].at[1]", "upstream_429_after_admission.rate", "estimate_error.factor"} {
		if !strings.Contains(got, want) {
			t.Errorf("problems lack %s:\n%s", want, got)
		}
	}
	good := Config{Rules: []Rule{{On: Any, At: []float64{0.5, 0.8, 1}}, {On: budget, At: []float64{0.9}}}, Forecast: true, RefusalSpike: 50, Upstream429Rate: 0.02, EstimateFactor: 2}
	if p := good.Problems(); len(p) != 0 || !good.Enabled() {
		t.Fatalf("a good config: %v", p)
	}
	if (Config{}).Enabled() {
		t.Fatal("an empty config is enabled")
	}
}
