package limiter

import (
	"fmt"
	"math"
	"time"
)

// Shape is how a charge's counter counts. A gauge's charge (KindInFlight,
// Charge.IsGauge) has ShapeSliding's zero value and no window.
type Shape uint8

const (
	// ShapeSliding is a window counter read with the previous window's
	// count: prev·(T−e)/T + cur (window.go).
	ShapeSliding Shape = iota
	// ShapeFixed is a window counter on its own: what the window holds is
	// what counts, and a new window starts empty. Calendar periods (a
	// budget's hour, day, week or month in its time zone) are fixed
	// windows of uneven lengths; Charge.End says where each ends.
	ShapeFixed
	// ShapeBucket is a token bucket kept as its theoretical arrival time
	// (GCRA): the counter holds the instant, in Unix nanoseconds, at which
	// the bucket would be full again. A charge of a units moves it to
	// max(value, Floor) + a·Unit, admitted when that is at most Limit (the
	// bucket's capacity in nanoseconds of refill) past now.
	ShapeBucket
)

// ParseWindow reads how a window counts, as config writes it: "sliding"
// (or "") by the sliding estimate, "fixed" in fixed windows.
func ParseWindow(s string) (fixed bool, err error) {
	switch s {
	case "", "sliding":
		return false, nil
	case "fixed":
		return true, nil
	}
	return false, fmt.Errorf("unknown window %q (want sliding or fixed)", s)
}

// Counting names how w counts, as ParseWindow reads it.
func (w Window) Counting() string {
	if w.Fixed {
		return "fixed"
	}
	return "sliding"
}

// Calendar is a budget's period: calendar-aligned in the budget's time
// zone, so a day is midnight to midnight there and a month has its own
// length.
type Calendar uint8

const (
	CalendarNone Calendar = iota
	CalendarHour
	CalendarDay
	CalendarWeek // from Monday 00:00
	CalendarMonth
)

// String returns the period's name in config.
func (c Calendar) String() string {
	switch c {
	case CalendarHour:
		return "hour"
	case CalendarDay:
		return "day"
	case CalendarWeek:
		return "week"
	case CalendarMonth:
		return "month"
	}
	return ""
}

// ParseCalendar reads a budget period: hour, day, week or month.
func ParseCalendar(s string) (Calendar, error) {
	switch s {
	case "hour":
		return CalendarHour, nil
	case "day":
		return CalendarDay, nil
	case "week":
		return CalendarWeek, nil
	case "month":
		return CalendarMonth, nil
	}
	return 0, fmt.Errorf("unknown budget period %q (want hour, day, week or month)", s)
}

// longest is the longest the period can be, for TTLs.
func (c Calendar) longest() time.Duration {
	switch c {
	case CalendarHour:
		return time.Hour + 30*time.Minute // an hour a DST change lengthens
	case CalendarDay:
		return 25 * time.Hour
	case CalendarWeek:
		return 7*Day + time.Hour
	}
	return 31*Day + time.Hour
}

// Bounds returns the period of c that contains now in loc (nil is UTC):
// now is in [start, end).
func (c Calendar) Bounds(now time.Time, loc *time.Location) (start, end time.Time) {
	if loc == nil {
		loc = time.UTC
	}
	t := now.In(loc)
	switch c {
	case CalendarHour:
		// The local hour's start is now less its local minutes and
		// seconds: right in a repeated hour too, where time.Date could
		// pick either instant.
		start = now.Add(-time.Duration(t.Minute())*time.Minute - time.Duration(t.Second())*time.Second - time.Duration(t.Nanosecond()))
		end = start.Add(time.Hour)
		if e := end.In(loc); e.Minute() != 0 || e.Second() != 0 {
			// An offset change that is not a whole hour: the next local
			// hour starts earlier or later than an hour from now.
			end = end.Add(-time.Duration(e.Minute())*time.Minute - time.Duration(e.Second())*time.Second)
			if !end.After(now) {
				end = end.Add(time.Hour)
			}
		}
		return start, end
	case CalendarDay:
		y, m, d := t.Date()
		start, end = time.Date(y, m, d, 0, 0, 0, 0, loc), time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	case CalendarWeek:
		y, m, d := t.Date()
		back := (int(t.Weekday()) + 6) % 7 // days since Monday
		start, end = time.Date(y, m, d-back, 0, 0, 0, 0, loc), time.Date(y, m, d-back+7, 0, 0, 0, 0, loc)
	default:
		y, m, _ := t.Date()
		start, end = time.Date(y, m, 1, 0, 0, 0, 0, loc), time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
	}
	// Where midnight does not exist (a DST change at 00:00), time.Date
	// may land either side of the gap: never leave now outside.
	if start.After(now) {
		start = now
	}
	if !end.After(now) {
		end = now.Add(time.Nanosecond)
	}
	return start, end
}

// maxBucketRefill bounds a bucket's time to refill from empty, so that
// its counter's arithmetic (nanoseconds of refill) stays within
// MaxAmount.
const maxBucketRefill = 7 * Day

// Interval is how long one unit takes to refill, rounded up to the
// nanosecond: a bucket never refills faster than configured.
func (b Bucket) Interval() time.Duration {
	if !(b.RefillPerSecond > 0) {
		return 0
	}
	return time.Duration(math.Ceil(1e9 / b.RefillPerSecond))
}

// fill is the bucket's capacity in nanoseconds of refill.
func (b Bucket) fill() int64 { return SatMul(b.Capacity, int64(b.Interval())) }

// ownProblems checks the bucket's capacity and refill.
func (b Bucket) ownProblems() []error {
	var errs []error
	if b.Capacity < 1 || b.Capacity > MaxAmount {
		errs = append(errs, fmt.Errorf("capacity: %d is outside 1..%d", b.Capacity, MaxAmount))
	}
	if !(b.RefillPerSecond > 0) || b.RefillPerSecond > 1e9 || math.IsInf(b.RefillPerSecond, 0) {
		errs = append(errs, fmt.Errorf("refill_per_second: %v is not a rate above 0 and at most 1e9", b.RefillPerSecond))
	} else if b.Capacity >= 1 && SatMul(b.Capacity+1, int64(b.Interval())) > int64(maxBucketRefill) {
		errs = append(errs, fmt.Errorf("refill_per_second: refilling %d units at %v a second takes longer than %s",
			b.Capacity, b.RefillPerSecond, maxBucketRefill))
	}
	return errs
}

// bucketCeiling is the largest arrival time the bucket may hold for a
// charge to be admitted: negative when the charge is larger than the
// bucket, which nothing admits.
func bucketCeiling(floor, fill, amount int64) int64 {
	if amount > fill {
		return -1
	}
	return floor + fill - amount
}

// bucketWait is how long until a charge of amount nanoseconds fits a
// bucket whose arrival time is tat.
func bucketWait(now time.Time, tat, fill, amount int64) (time.Duration, bool) {
	if amount > fill {
		return 0, false
	}
	return time.Duration(max(0, tat+amount-fill-now.UnixNano())), true
}

// bucketDebt is how far ahead of now the arrival time is: the refill the
// bucket lacks.
func bucketDebt(now time.Time, tat int64) int64 { return max(0, tat-now.UnixNano()) }
