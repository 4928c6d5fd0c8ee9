// Package limiter is tollgate's admission domain: rules and how they match a
// request, request and token windows with the sliding-window estimate,
// concurrency gauges, and the decision a client is told about (Retry-After and
// the x-ratelimit-* values).
//
// The package is pure. Every time-dependent function takes the instant to
// decide at as an argument; storage is reached only through the small Store
// interface defined here and implemented in infra/. Nothing in this package
// knows about HTTP or DynamoDB.
package limiter
