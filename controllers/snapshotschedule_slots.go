package controllers

import (
	"fmt"
	"sort"
	"time"

	"github.com/robfig/cron/v3"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
)

// Schedule arithmetic, pure: parsing, the slot that is due, the name a slot's snapshot
// gets, and which finished snapshots retention removes.

// minSlotInterval is the finest schedule accepted: snapshot names carry the slot to the
// minute, so two slots in one minute would share a name.
const minSlotInterval = time.Minute

// parseSchedule parses a five-field cron expression or a descriptor (@daily, @every 6h),
// always in UTC.
func parseSchedule(expr string) (cron.Schedule, error) {
	sched, err := cron.ParseStandard(expr)
	if err != nil {
		return nil, err
	}
	switch s := sched.(type) {
	case *cron.SpecSchedule:
		s.Location = time.UTC
	case cron.ConstantDelaySchedule:
		if s.Delay < minSlotInterval {
			return nil, fmt.Errorf("@every %s is more often than once a minute", s.Delay)
		}
	}
	return sched, nil
}

// mostRecentSlot returns the latest slot after `after` that is not after now: the one
// due. Slots missed in between (the operator was down) are not run one by one; only the
// latest is. @every slots are counted; far behind on a frequent cron schedule, it looks
// back from now in growing windows instead of walking every missed slot.
func mostRecentSlot(sched cron.Schedule, after, now time.Time) (time.Time, bool) {
	first := sched.Next(after)
	if first.IsZero() || first.After(now) {
		return time.Time{}, false
	}
	if every, ok := sched.(cron.ConstantDelaySchedule); ok {
		return first.Add(now.Sub(first) / every.Delay * every.Delay), true
	}
	from := after
	if second := sched.Next(first); second.After(first) {
		for window := 2 * second.Sub(first); now.Add(-window).After(first); window *= 2 {
			if t := sched.Next(now.Add(-window)); !t.IsZero() && !t.After(now) {
				from = now.Add(-window)
				break
			}
		}
	}
	last := first
	for t := sched.Next(from); !t.IsZero() && !t.After(now); t = sched.Next(t) {
		last = t
	}
	return last, true
}

// slotSnapshotName is the name of the snapshot for a slot: the store's name and the
// slot in UTC to the minute, so that one slot can never get two snapshots.
func slotSnapshotName(store string, slot time.Time) string {
	return store + "-" + slot.UTC().Format("200601021504")
}

// retentionVictim is a finished scheduled snapshot that retention removes, and why.
type retentionVictim struct {
	snap   *memoryv1alpha1.MemorySnapshot
	reason string
}

// retentionVictims picks the finished snapshots to remove: those older than maxAge
// (by their slot), and beyond the newest keepLast finished ones, except that keepLast
// never removes the newest successful snapshot (a run of failures must not leave the
// store without a usable package). Snapshots still running are never picked.
// nextExpiry is when the oldest kept snapshot will pass maxAge (zero when never).
func retentionVictims(snaps []memoryv1alpha1.MemorySnapshot, keepLast int, maxAge *time.Duration, now time.Time) (
	victims []retentionVictim, nextExpiry time.Time) {
	var finished []*memoryv1alpha1.MemorySnapshot
	for i := range snaps {
		if snaps[i].IsDone() && snaps[i].DeletionTimestamp.IsZero() {
			finished = append(finished, &snaps[i])
		}
	}
	sort.SliceStable(finished, func(i, j int) bool {
		ti, tj := finished[i].ScheduledAt(), finished[j].ScheduledAt()
		if !ti.Equal(&tj) {
			return tj.Before(&ti)
		}
		return finished[i].Name > finished[j].Name
	})
	newestSucceeded := -1
	for i, s := range finished {
		if s.Succeeded() {
			newestSucceeded = i
			break
		}
	}
	for i, s := range finished {
		at := s.ScheduledAt()
		switch {
		case maxAge != nil && now.Sub(at.Time) > *maxAge:
			victims = append(victims, retentionVictim{snap: s, reason: fmt.Sprintf("older than maxAge %s", *maxAge)})
		case i >= keepLast && i != newestSucceeded:
			victims = append(victims, retentionVictim{snap: s, reason: fmt.Sprintf("beyond keepLast %d", keepLast)})
		case maxAge != nil:
			if exp := at.Add(*maxAge); nextExpiry.IsZero() || exp.Before(nextExpiry) {
				nextExpiry = exp
			}
		}
	}
	return victims, nextExpiry
}
