package metrics

import (
	"net/http"
	"strings"
	"sync"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Prometheus keeps the measurements as Prometheus counters and histograms
// in its own registry (no process or Go collectors: the numbers are
// tollgate's), created as they are first seen.
type Prometheus struct {
	reg        *prometheus.Registry
	mu         sync.Mutex
	counters   map[string]*prometheus.CounterVec
	histograms map[string]*prometheus.HistogramVec
}

// alarmed are the counters alarms watch: they exist, at 0, from the
// start, so that "no failures yet" reads as 0 and a rate over them is
// defined, not absent until the first event.
var alarmed = []string{StoreFailures, FailOpenAdmissions, BatchesGivenUp}

// NewPrometheus returns a Prometheus sink holding the alarmed counters at
// 0 and nothing else.
func NewPrometheus() *Prometheus {
	p := &Prometheus{reg: prometheus.NewRegistry(), counters: map[string]*prometheus.CounterVec{}, histograms: map[string]*prometheus.HistogramVec{}}
	for _, name := range alarmed {
		p.Count(name, 0)
	}
	return p
}

// Handler serves the metrics in the Prometheus text format.
func (p *Prometheus) Handler() http.Handler {
	return promhttp.HandlerFor(p.reg, promhttp.HandlerOpts{})
}

// snake turns a CloudWatch name into a Prometheus one: "NearLimit" →
// "near_limit".
func snake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

func labels(dims []string) ([]string, prometheus.Labels) {
	var names []string
	vals := prometheus.Labels{}
	for i := 0; i+1 < len(dims); i += 2 {
		n := snake(dims[i])
		names = append(names, n)
		vals[n] = dims[i+1]
	}
	return names, vals
}

// Count implements Sink.
func (p *Prometheus) Count(name string, n float64, dims ...string) {
	names, vals := labels(dims)
	key := name + "|" + strings.Join(names, ",")
	p.mu.Lock()
	c, ok := p.counters[key]
	if !ok {
		c = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "tollgate", Name: snake(name) + "_total", Help: help[name]}, names)
		if err := p.reg.Register(c); err != nil {
			p.mu.Unlock()
			return // the same name with other labels: keep the first
		}
		p.counters[key] = c
	}
	p.mu.Unlock()
	c.With(vals).Add(n)
}

// Observe implements Sink: a histogram in the unit's base (milliseconds
// become seconds).
func (p *Prometheus) Observe(name string, v float64, unit string, dims ...string) {
	names, vals := labels(dims)
	metric := snake(name)
	if unit == "Milliseconds" {
		v /= 1000
		metric += "_seconds"
	}
	key := name + "|" + strings.Join(names, ",")
	p.mu.Lock()
	h, ok := p.histograms[key]
	if !ok {
		h = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "tollgate", Name: metric, Help: help[name],
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}, names)
		if err := p.reg.Register(h); err != nil {
			p.mu.Unlock()
			return
		}
		p.histograms[key] = h
	}
	p.mu.Unlock()
	h.With(vals).Observe(v)
}

var help = map[string]string{
	Admitted:            "Requests admitted, by route and provider.",
	Refused:             "Requests refused, by rule and reason.",
	NearLimit:           "Admissions that left a rule at 80 % or more of its limit.",
	UpstreamRateLimited: "Upstream 429s after admission, by provider.",
	StoreFailures:       "Admissions the limit store could not answer.",
	FailOpenAdmissions:  "Requests admitted without limits because the store could not answer (failure mode open).",
	AdmissionLatency:    "How long an admission took.",
	EstimateError:       "Used over reserved tokens per reconciler run, by route.",
	ReconcilerLag:       "How far behind the newest record a reconciler run was.",
	ReconcilerRecords:   "Records read per reconciler run.",
	BatchesGivenUp:      "Batches given up uncharged: their polls kept failing, or they never ended.",
}
