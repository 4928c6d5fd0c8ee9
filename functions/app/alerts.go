package app

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tollgate/tollgate/functions/config"
	"github.com/tollgate/tollgate/infra/configstore"
	"github.com/tollgate/tollgate/infra/dynamostore"
	"github.com/tollgate/tollgate/infra/metrics"
	"github.com/tollgate/tollgate/infra/notify"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/alert"
)

// Alerts are evaluated where the reconciler runs, never on a request's
// path: each evaluation reads every rule's live use (the limiter's
// AllUsage: one batch read per hundred counters), the last 16 minutes of
// stats (one BatchGetItem of 54 keys) and the alerts firing (one query),
// decides with limiter/alert which hold, and fires each new one with one
// conditional PutItem on its alert item: the one process whose write
// succeeds delivers it, once per threshold and period across the fleet.
// A firing alert that no longer holds is resolved the same way. Then it
// samples each budget's spending (the forecast's earlier point) and each
// rule's peak use of the hour (the review report's), in one write each.

// AlertStore keeps the fleet-wide alert items (configstore's stores).
type AlertStore interface {
	FireAlert(ctx context.Context, a configstore.Alert) (bool, error)
	ResolveAlert(ctx context.Context, id string, at time.Time, doc json.RawMessage) (configstore.Alert, bool, error)
	Alerts(ctx context.Context) ([]configstore.Alert, error)
}

// alerting is the alert evaluation of one process.
type alerting struct {
	cfg     config.Alerts
	store   AlertStore
	stats   metrics.StatsStore
	limiter *limiter.Limiter
	queue   *notify.Queue
	log     *slog.Logger
	now     func() time.Time

	mu       sync.Mutex // one evaluation at a time
	last     time.Time
	peakHour time.Time
	peaks    map[string]float64 // this process's highest use per rule in peakHour
}

// evalTimeout bounds one evaluation's store calls.
const evalTimeout = 10 * time.Second

// newAlerting builds the evaluation when the stores can keep alerts and
// stats; nil otherwise. With nothing to watch it only samples the rules'
// peak use, for the review report.
func (a *App) newAlerting(ctx context.Context) (*alerting, error) {
	ac := a.Config.Alerts
	store, ok := a.ConfigStore.(AlertStore)
	stats, sok := a.Store.(metrics.StatsStore)
	if !ok || !sok {
		if ac.Watch.Enabled() {
			a.Log.Warn("alerts are configured but the store keeps none; not evaluating them")
		}
		return nil, nil
	}
	var targets []notify.Target
	for i, h := range ac.Webhooks {
		if h.SecretParameter != "" {
			r, err := a.keys(ctx)
			if err != nil {
				return nil, fmt.Errorf("alerts.webhooks[%d].secret_parameter: %w", i, err)
			}
			if h.Secret, err = r.Parameter(ctx, h.SecretParameter); err != nil {
				return nil, fmt.Errorf("alerts.webhooks[%d].secret_parameter: %w", i, err)
			}
		}
		targets = append(targets, notify.Webhook{URL: h.URL, Secret: h.Secret})
	}
	if ac.TopicARN != "" {
		cfg, err := dynamostore.LoadAWSConfig(ctx, dynamostore.ClientOptions{})
		if err != nil {
			return nil, fmt.Errorf("TOLLGATE_ALERT_TOPIC_ARN: AWS configuration: %w", err)
		}
		sns, err := notify.NewSNS(ac.TopicARN, cfg)
		if err != nil {
			return nil, fmt.Errorf("TOLLGATE_ALERT_TOPIC_ARN: %w", err)
		}
		targets = append(targets, sns)
	}
	q := notify.NewQueue(notify.QueueConfig{Targets: targets, Logger: a.Log})
	return &alerting{cfg: ac, store: store, stats: stats, limiter: a.Limiter, queue: q, log: a.Log,
		now: func() time.Time { return a.Clock() }}, nil
}

// EvaluateAlerts evaluates alerts now when alerts.every has passed since
// the last evaluation of this process (or always, with force), and queues
// the deliveries this process won. It returns what fired and resolved.
// The evaluation is built on first use (a gateway inside Lambda, which
// never evaluates, does not pay for it).
func (a *App) EvaluateAlerts(ctx context.Context, force bool) (fired, resolved []string) {
	a.alertsMu.Lock()
	if a.alerts == nil && !a.alertsBuilt {
		al, err := a.newAlerting(ctx)
		if err != nil {
			a.Log.Error("alerts cannot be evaluated", "err", err.Error())
		}
		a.alerts, a.alertsBuilt = al, err == nil
		if al != nil {
			al.queue.Start(a.runCtx)
		}
	}
	al := a.alerts
	a.alertsMu.Unlock()
	if al == nil {
		return nil, nil
	}
	return al.evaluate(ctx, force)
}

// DrainAlerts waits until the queued deliveries are done or ctx ends.
func (a *App) DrainAlerts(ctx context.Context) bool {
	a.alertsMu.Lock()
	al := a.alerts
	a.alertsMu.Unlock()
	if al == nil {
		return true
	}
	return al.queue.Drain(ctx)
}

// AlertsSummary is the alerts' configuration as GET /admin/alerts shows
// it: what is watched, and where deliveries go (webhooks by host only).
func (a *App) AlertsSummary() map[string]any { return alertSummary(a.Config.Alerts) }

// evaluate reads the rules' use, the stats and the alerts firing, fires
// the alerts that newly hold and resolves those that no longer do (not
// more often than every Every, unless forced), and samples the peaks.
func (e *alerting) evaluate(ctx context.Context, force bool) (fired, resolved []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	if !force && now.Sub(e.last) < e.cfg.Every {
		return nil, nil
	}
	e.last = now
	ctx, cancel := context.WithTimeout(ctx, evalTimeout)
	defer cancel()
	usage, err := e.limiter.AllUsage(ctx, now)
	if err != nil {
		e.log.Warn("alerts not evaluated: the rules' use could not be read", "err", err.Error())
		return nil, nil
	}
	if !e.cfg.Watch.Enabled() {
		e.sample(ctx, now, usage) // the report's peaks only
		return nil, nil
	}
	minute := now.UTC().Truncate(time.Minute)
	ago := minute.Add(-alert.ForecastWindow)
	keys := statsKeys(minute, ago)
	stats, err := e.stats.ReadStats(ctx, keys)
	if err != nil {
		e.log.Warn("alerts not evaluated: the stats could not be read", "err", err.Error())
		return nil, nil
	}
	kept, err := e.store.Alerts(ctx)
	if err != nil {
		e.log.Warn("alerts not evaluated: the alerts firing could not be read", "err", err.Error())
		return nil, nil
	}
	active := map[string]bool{}
	docs := map[string]json.RawMessage{}
	for _, k := range kept {
		if k.Active {
			active[k.ID], docs[k.ID] = true, k.Doc
		}
	}
	in := alert.Input{Now: now, Uses: usesOf(usage, earlierSpent(stats, ago))}
	for i := 16; i >= 0; i-- {
		in.Minutes = append(in.Minutes, minuteOf(stats, minute.Add(-time.Duration(i)*time.Minute)))
	}
	holding := alert.Evaluate(e.cfg.Watch, in, active)
	fired, holds := e.fire(ctx, now, holding, active)
	resolved = e.resolve(ctx, now, active, docs, holds)
	e.sample(ctx, now, usage)
	return fired, resolved
}

// statsKeys are the stats an evaluation reads: the refusals, operations
// and estimates of the last 17 minutes to minute, and what was spent
// about ago (for forecasts).
func statsKeys(minute, ago time.Time) []metrics.StatsKey {
	var keys []metrics.StatsKey
	for i := 16; i >= 0; i-- {
		m := minute.Add(-time.Duration(i) * time.Minute)
		keys = append(keys, metrics.StatsKey{Kind: metrics.StatsRefused, At: m}, metrics.StatsKey{Kind: metrics.StatsOps, At: m},
			metrics.StatsKey{Kind: metrics.StatsEstimate, At: m})
	}
	for _, m := range []time.Time{ago, ago.Add(-time.Minute), ago.Add(time.Minute)} {
		keys = append(keys, metrics.StatsKey{Kind: metrics.StatsSpent, At: m})
	}
	return keys
}

// fire records and delivers each holding alert not already active, and
// returns those it fired and the ids of all that hold.
func (e *alerting) fire(ctx context.Context, now time.Time, holding []alert.Alert, active map[string]bool) (fired []string, holds map[string]bool) {
	holds = map[string]bool{}
	for _, al := range holding {
		holds[al.ID] = true
		if active[al.ID] {
			continue
		}
		doc := deliveryDoc(al, "firing", now, time.Time{})
		ok, err := e.store.FireAlert(ctx, configstore.Alert{ID: al.ID, Period: al.Period, FiredAt: now.UTC(), Doc: doc})
		switch {
		case err != nil:
			e.log.Warn("could not record an alert; trying again next evaluation", "alert", al.ID, "err", err.Error())
		case ok:
			fired = append(fired, al.ID)
			e.log.Warn("alert fired", "alert", al.ID, "kind", al.Kind, "subject", al.Subject, "value", al.Value, "period", al.Period, "message", al.Message)
			e.queue.Enqueue(notification(al.ID, "firing", al.Message, doc))
		}
	}
	return fired, holds
}

// resolve resolves and delivers each active alert that no longer holds,
// and returns those it resolved.
func (e *alerting) resolve(ctx context.Context, now time.Time, active map[string]bool, docs map[string]json.RawMessage, holds map[string]bool) (resolved []string) {
	for _, id := range slices.Sorted(maps.Keys(active)) {
		if holds[id] {
			continue
		}
		var al alert.Alert
		_ = json.Unmarshal(docs[id], &al)
		doc := deliveryDoc(al, "resolved", now, now)
		_, ok, err := e.store.ResolveAlert(ctx, id, now.UTC(), doc)
		switch {
		case err != nil:
			e.log.Warn("could not resolve an alert; trying again next evaluation", "alert", id, "err", err.Error())
		case ok:
			resolved = append(resolved, id)
			e.log.Info("alert resolved", "alert", id)
			e.queue.Enqueue(notification(id, "resolved", "resolved: "+al.Message, doc))
		}
	}
	return resolved
}

// sample writes what each budget has spent (for later forecasts) and the
// rules' peak use of the hour when it rose.
func (e *alerting) sample(ctx context.Context, now time.Time, usage []limiter.RuleUsage) {
	spent := map[string]float64{"t": float64(now.Unix())}
	hour := now.UTC().Truncate(time.Hour)
	if !hour.Equal(e.peakHour) {
		e.peakHour, e.peaks = hour, map[string]float64{}
	}
	rose := false
	for _, u := range usesOf(usage, nil) {
		if u.Limit <= 0 {
			continue
		}
		if u.Dimension == "usd" {
			spent[u.Rule] = float64(u.Used)
		}
		frac := float64(u.Used) / float64(u.Limit)
		if frac > e.peaks[u.Rule] {
			e.peaks[u.Rule], rose = frac, true
		}
	}
	if len(spent) > 1 {
		if err := e.stats.SetStats(ctx, metrics.StatsSpent, now.UTC().Truncate(time.Minute), spent); err != nil {
			e.log.Warn("could not sample budgets' spending", "err", err.Error())
		}
	}
	if rose {
		if err := e.stats.SetStats(ctx, metrics.StatsPeak, hour, e.peaks); err != nil {
			e.log.Warn("could not record the rules' peak use", "err", err.Error())
		}
	}
}

// usesOf turns live use into the alerts' readings: what weighs on each
// dimension's limit (the sliding estimate; a budget's spent money,
// reservations aside), with the budgets' earlier samples.
func usesOf(usage []limiter.RuleUsage, earlier map[string]alert.Sample) []alert.Use {
	var out []alert.Use
	for _, u := range usage {
		id := u.Rule.ID()
		for _, d := range u.Dimensions {
			use := alert.Use{Rule: id, Dimension: dimensionName(d.Kind), Limit: d.Limit, Used: max(0, d.Limit-d.Remaining),
				PeriodStart: u.WindowStart, PeriodEnd: u.WindowEnd}
			if d.Kind == limiter.KindCost {
				use.Used = max(0, d.Used-d.Reserved)
				use.Earlier = earlier[id]
			}
			if d.Kind == limiter.KindInFlight {
				use.Used = d.Used
			}
			out = append(out, use)
		}
	}
	return out
}

func dimensionName(k limiter.Kind) string {
	switch k {
	case limiter.KindRequests:
		return "requests"
	case limiter.KindTokens:
		return "tokens"
	case limiter.KindInputTokens:
		return "input_tokens"
	case limiter.KindOutputTokens:
		return "output_tokens"
	case limiter.KindInFlight:
		return "in_flight"
	case limiter.KindCost:
		return "usd"
	}
	return k.String()
}

// earlierSpent is the budgets' spending sampled about ForecastWindow
// before: the sample of that minute, else of the minute before or after.
func earlierSpent(stats map[metrics.StatsKey]map[string]float64, ago time.Time) map[string]alert.Sample {
	for _, m := range []time.Time{ago, ago.Add(-time.Minute), ago.Add(time.Minute)} {
		s := stats[metrics.StatsKey{Kind: metrics.StatsSpent, At: m}]
		if len(s) == 0 {
			continue
		}
		at := time.Unix(int64(s["t"]), 0)
		out := map[string]alert.Sample{}
		for id, v := range s {
			if id != "t" {
				out[id] = alert.Sample{At: at, Used: int64(v)}
			}
		}
		return out
	}
	return nil
}

// minuteOf reads one minute's counts from the stats items.
func minuteOf(stats map[metrics.StatsKey]map[string]float64, m time.Time) alert.Minute {
	out := alert.Minute{Start: m, Refusals: stats[metrics.StatsKey{Kind: metrics.StatsRefused, At: m}],
		Waits: map[string]float64{}, Admitted: map[string]float64{}, Upstream429: map[string]float64{},
		Reserved: map[string]float64{}, Used: map[string]float64{}}
	for name, v := range stats[metrics.StatsKey{Kind: metrics.StatsOps, At: m}] {
		switch kind, what, _ := strings.Cut(name, ":"); kind {
		case metrics.OutcomeWaited + ".class":
			out.Waits[what] += v
		case metrics.OpsAdmitted:
			out.Admitted[what] += v
		case metrics.OpsUpstream429:
			out.Upstream429[what] += v
		}
	}
	for name, v := range stats[metrics.StatsKey{Kind: metrics.StatsEstimate, At: m}] {
		if route, ok := strings.CutPrefix(name, "reserved:"); ok {
			out.Reserved[route] += v
		} else if route, ok := strings.CutPrefix(name, "used:"); ok {
			out.Used[route] += v
		}
	}
	return out
}

// delivery is an alert as webhooks receive it: every field, its status,
// and a Slack-compatible text.
type delivery struct {
	alert.Alert
	Status     string     `json:"status"` // firing or resolved
	FiredAt    *time.Time `json:"fired_at,omitempty"`
	ResolvedAt *time.Time `json:"resolved_at,omitempty"`
	Text       string     `json:"text"`
	Source     string     `json:"source"`
}

func deliveryDoc(al alert.Alert, status string, fired, resolved time.Time) json.RawMessage {
	d := delivery{Alert: al, Status: status, Source: "tollgate"}
	if status == "firing" {
		f := fired.UTC()
		d.FiredAt = &f
		d.Text = "[tollgate] FIRING " + al.Kind + ": " + al.Message
	} else {
		r := resolved.UTC()
		d.ResolvedAt = &r
		d.Text = "[tollgate] RESOLVED " + al.Kind + ": " + al.Message
	}
	b, _ := json.Marshal(d)
	return b
}

func notification(id, status, message string, doc json.RawMessage) notify.Notification {
	subject := "tollgate " + status + ": " + message
	return notify.Notification{ID: id + "|" + status, Subject: subject, Body: doc}
}

// alertSummary is how GET /admin/alerts names the configuration.
func alertSummary(c config.Alerts) map[string]any {
	hooks := make([]string, len(c.Webhooks))
	for i, h := range c.Webhooks {
		hooks[i] = notify.Webhook{URL: h.URL}.Name()
	}
	rules := c.Watch.Rules
	if rules == nil {
		rules = []alert.Rule{}
	}
	return map[string]any{"rules": rules, "forecast": c.Watch.Forecast, "refusal_spike_per_minute": c.Watch.RefusalSpike,
		"upstream_429_rate": c.Watch.Upstream429Rate, "estimate_error_factor": c.Watch.EstimateFactor,
		"class_waits": map[string]float64{"factor": c.Watch.ClassWaits.Factor, "per_minute": c.Watch.ClassWaits.PerMinute},
		"webhooks":    hooks, "sns_topic": c.TopicARN != "", "every": c.Every.String()}
}
