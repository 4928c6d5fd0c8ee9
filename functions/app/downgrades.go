package app

import (
	"sync/atomic"

	"github.com/tollgate/tollgate/functions/config"
	"github.com/tollgate/tollgate/functions/gateway/admission"
	"github.com/tollgate/tollgate/infra/configstore"
)

// managedDowngrades returns the admin API's downgrades as the watcher
// last loaded them, converted once per load, not once per request.
func managedDowngrades(w *configstore.Watcher) func() []admission.Downgrade {
	type converted struct {
		from []configstore.Downgrade
		to   []admission.Downgrade
	}
	var last atomic.Pointer[converted]
	return func() []admission.Downgrade {
		ds := w.Downgrades()
		if len(ds) == 0 {
			return nil
		}
		if c := last.Load(); c != nil && len(c.from) == len(ds) && &c.from[0] == &ds[0] {
			return c.to
		}
		out := admissionDowngrades(ds)
		last.Store(&converted{from: ds, to: out})
		return out
	}
}

// admissionDowngrades are stored downgrades as admission tries them.
func admissionDowngrades(ds []configstore.Downgrade) []admission.Downgrade {
	var out []admission.Downgrade
	for _, d := range ds {
		out = append(out, admission.Downgrade{From: d.From, To: d.To, Refused: d.Refused, BudgetBelow: d.BudgetBelow, Classes: d.Classes})
	}
	return out
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
