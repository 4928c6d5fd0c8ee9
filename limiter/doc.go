// Package limiter is tollgate's admission domain: rules and how they match a
// request, their kinds (request and token windows with the sliding-window
// estimate or fixed windows, concurrency gauges, token buckets, budgets),
// fair shares, and the decision a client is told about (Retry-After and the
// x-ratelimit-* values).
//
// Time is a parameter: every time-dependent function takes the instant to
// decide at as an argument, and nothing here reads the clock. Storage is
// reached only through the small Store interface defined here (and the
// optional Rosters) and implemented in infra/. Nothing in this package knows
// about HTTP or DynamoDB.
//
// The package is not stateless. Rules, rule sets, charges and decisions are
// values, but a Limiter keeps, besides the rule set in force (swapped
// atomically by SetRules):
//
//   - what this instance knows of each fair-share rule's members (their
//     demand, who is backlogged, what their counters held), which admitting
//     refreshes from the store's rosters at most every FairRefresh and
//     updates from each charge's answer (fair.go: fairShares);
//   - how many slots the old shard layout of a re-sharded concurrency rule
//     held when last read (layout.go: oldSlots).
//
// Both are safe for concurrent use. The first decides shares, never the
// limit (a rule's ceiling is at most its limit whatever it holds); the
// second keeps a re-sharded gauge within its limit while the old layout's
// slots drain.
package limiter
