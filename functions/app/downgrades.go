package app

import (
	"sync"

	"github.com/tollgate/tollgate/functions/config"
	"github.com/tollgate/tollgate/functions/gateway/admission"
	"github.com/tollgate/tollgate/infra/configstore"
)

// managedDowngrades returns the admin API's downgrades as the watcher
// last loaded them, converted once per load, not once per request.
func managedDowngrades(w *configstore.Watcher) func() []admission.Downgrade {
	var mu sync.Mutex
	var from []configstore.Downgrade
	var to []admission.Downgrade
	return func() []admission.Downgrade {
		ds := w.Downgrades()
		if len(ds) == 0 {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if len(ds) == len(from) && &ds[0] == &from[0] {
			return to
		}
		out := make([]admission.Downgrade, 0, len(ds))
		for _, d := range ds {
			out = append(out, admission.Downgrade{From: d.From, To: d.To, Refused: d.Refused, BudgetBelow: d.BudgetBelow, Classes: d.Classes})
		}
		from, to = ds, out
		return to
	}
}

// configDowngrades are the configuration's downgrades as the admin API
// lists them.
func configDowngrades(specs []config.DowngradeSpec) []configstore.Downgrade {
	var out []configstore.Downgrade
	for _, d := range specs {
		out = append(out, configstore.Downgrade{From: d.From, To: d.To, Refused: d.Refused, BudgetBelow: d.BudgetBelow, Classes: d.Classes})
	}
	return out
}
