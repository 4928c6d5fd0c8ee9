package adminapi

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tollgate/tollgate/infra/configstore"
)

// Downgrades through the admin API: GET /admin/downgrades lists those of
// the configuration and those set here; POST /admin/downgrades sets one
// (a second POST of the same two models replaces it); DELETE
// /admin/downgrades removes one, named by its two models. Every instance
// follows within the rule-propagation bound. The master key's only: a
// downgrade changes the model a request gets, whoever sends it.

// DowngradeStore keeps the admin API's downgrades (configstore's stores).
type DowngradeStore interface {
	PutDowngrade(ctx context.Context, d configstore.Downgrade) error
	DeleteDowngrade(ctx context.Context, key string) error
}

type downgradeInput struct {
	From string `json:"from"`
	To   string `json:"to"`
	When struct {
		Refused     bool    `json:"refused"`
		BudgetBelow float64 `json:"budget_below"`
	} `json:"when"`
	Classes []string `json:"classes"`
}

type downgradeView struct {
	From string `json:"from"`
	To   string `json:"to"`
	When struct {
		Refused     bool    `json:"refused"`
		BudgetBelow float64 `json:"budget_below,omitempty"`
	} `json:"when"`
	Classes   []string   `json:"classes"`
	Source    string     `json:"source"`
	CreatedAt *time.Time `json:"created_at,omitempty"`
}

func downgradeViewOf(d configstore.Downgrade, source string) downgradeView {
	v := downgradeView{From: d.From, To: d.To, Classes: d.Classes, Source: source}
	v.When.Refused, v.When.BudgetBelow = d.Refused, d.BudgetBelow
	if !d.CreatedAt.IsZero() {
		at := d.CreatedAt.UTC()
		v.CreatedAt = &at
	}
	return v
}

func (h *Handler) downgradeStore(w http.ResponseWriter, r *http.Request) (DowngradeStore, bool) {
	if who := principalOf(r); !who.master {
		h.forbidden(w, r, who, "downgrades change the model every caller gets: the master key's only")
		return nil, false
	}
	ds, ok := h.cfg.Store.(DowngradeStore)
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", "this store keeps no downgrades", nil)
	}
	return ds, ok
}

func (h *Handler) listDowngrades(w http.ResponseWriter, r *http.Request) {
	if _, ok := h.downgradeStore(w, r); !ok {
		return
	}
	snap, err := h.cfg.Store.Snapshot(r.Context())
	if err != nil {
		h.storeFailed(w, err)
		return
	}
	out := []downgradeView{}
	for _, d := range h.cfg.ConfigDowngrades {
		out = append(out, downgradeViewOf(d, "config"))
	}
	for _, d := range snap.Downgrades {
		out = append(out, downgradeViewOf(d, "manual"))
	}
	writeJSON(w, http.StatusOK, map[string]any{"downgrades": out})
}

// check reads a downgrade's input: two provider/model names of providers
// this gateway has, a condition, and classes that exist.
func (h *Handler) checkDowngrade(in downgradeInput, full bool) (configstore.Downgrade, []fieldError) {
	var errs []fieldError
	for _, f := range []struct{ name, v string }{{"from", in.From}, {"to", in.To}} {
		p, m, ok := strings.Cut(f.v, "/")
		switch {
		case !ok || p == "" || m == "":
			errs = append(errs, fieldError{Field: f.name, Message: "required: provider/model (openai/gpt-4o-mini)"})
		case len(f.v) > 200 || strings.ContainsFunc(f.v, func(r rune) bool { return r == '>' || r <= ' ' || r == 0x7f }):
			errs = append(errs, fieldError{Field: f.name, Message: "a model name of at most 200 characters, without spaces, control characters or '>'"})
		case !full:
			// Removing one needs its name only: its provider may be gone.
		case h.cfg.Providers != nil && !slices.ContainsFunc(h.cfg.Providers, func(pr Provider) bool { return strings.EqualFold(pr.Name, p) }):
			errs = append(errs, fieldError{Field: f.name, Message: "names no provider of this gateway"})
		}
	}
	if strings.EqualFold(in.From, in.To) && in.From != "" {
		errs = append(errs, fieldError{Field: "to", Message: "is the same model as from"})
	}
	d := configstore.Downgrade{From: in.From, To: in.To, Refused: in.When.Refused, BudgetBelow: in.When.BudgetBelow, Classes: in.Classes}
	if !full {
		return d, errs
	}
	switch {
	case !(in.When.BudgetBelow >= 0 && in.When.BudgetBelow < 1):
		errs = append(errs, fieldError{Field: "when.budget_below", Message: "a fraction from 0 to 1 (0.1: a tenth left)"})
	case !in.When.Refused && in.When.BudgetBelow == 0:
		errs = append(errs, fieldError{Field: "when", Message: "give refused: true, budget_below, or both"})
	}
	if len(in.Classes) == 0 {
		errs = append(errs, fieldError{Field: "classes", Message: "required: the classes that opt in (a downgrade changes the model a request gets)"})
	}
	for _, c := range in.Classes {
		if h.cfg.Classes != nil && !slices.Contains(h.cfg.Classes, c) {
			errs = append(errs, fieldError{Field: "classes", Message: c + " is not a traffic class: want one of " + strings.Join(h.cfg.Classes, ", ")})
		}
	}
	return d, errs
}

// readDowngrade reads a write's downgrade (full: all of it, else its two
// models), answering when it cannot.
func (h *Handler) readDowngrade(w http.ResponseWriter, r *http.Request, full bool) (DowngradeStore, configstore.Downgrade, bool) {
	ds, ok := h.downgradeStore(w, r)
	if !ok {
		return nil, configstore.Downgrade{}, false
	}
	var in downgradeInput
	var errs []fieldError
	if _, ok := decode(w, r, &in, &errs); !ok {
		return nil, configstore.Downgrade{}, false
	}
	d, more := h.checkDowngrade(in, full)
	if errs = append(errs, more...); len(errs) > 0 {
		invalid(w, errs)
		return nil, configstore.Downgrade{}, false
	}
	return ds, d, true
}

func (h *Handler) putDowngrade(w http.ResponseWriter, r *http.Request) {
	ds, d, ok := h.readDowngrade(w, r, true)
	if !ok {
		return
	}
	if slices.ContainsFunc(h.cfg.ConfigDowngrades, func(c configstore.Downgrade) bool { return c.Key() == d.Key() }) {
		writeError(w, http.StatusConflict, "conflict", "the configuration defines this downgrade; change it there", nil)
		return
	}
	snap, err := h.cfg.Store.Snapshot(r.Context())
	if err != nil {
		h.storeFailed(w, err)
		return
	}
	status, before := http.StatusCreated, any(nil)
	d.CreatedAt = h.cfg.Now().UTC()
	if i := slices.IndexFunc(snap.Downgrades, func(o configstore.Downgrade) bool { return o.Key() == d.Key() }); i >= 0 {
		status, before = http.StatusOK, downgradeViewOf(snap.Downgrades[i], "manual")
		d.CreatedAt = snap.Downgrades[i].CreatedAt // it keeps its place in the order
	}
	if err := ds.PutDowngrade(r.Context(), d); err != nil {
		h.storeFailed(w, err)
		return
	}
	h.reload(r)
	view := downgradeViewOf(d, "manual")
	h.log.Info("downgrade set", "from", d.From, "to", d.To, "classes", d.Classes, "actor", principalOf(r).actor())
	h.record(r, "downgrade:"+d.Key(), "", before, view)
	writeJSON(w, status, view)
}

func (h *Handler) deleteDowngrade(w http.ResponseWriter, r *http.Request) {
	ds, d, ok := h.readDowngrade(w, r, false)
	if !ok {
		return
	}
	err := ds.DeleteDowngrade(r.Context(), d.Key())
	switch {
	case errors.Is(err, configstore.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", "no downgrade from "+d.From+" to "+d.To+" was set through the admin API", nil)
		return
	case err != nil:
		h.storeFailed(w, err)
		return
	}
	h.reload(r)
	h.log.Info("downgrade removed", "from", d.From, "to", d.To, "actor", principalOf(r).actor())
	h.record(r, "downgrade:"+d.Key(), "", map[string]string{"from": d.From, "to": d.To}, nil)
	writeJSON(w, http.StatusOK, map[string]any{"removed": map[string]string{"from": d.From, "to": d.To}})
}
