package controllers

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
)

// Pure tests of the schedule arithmetic: no API server, no clock but the ones given.

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestParseSchedule(t *testing.T) {
	for _, ok := range []string{"0 3 * * *", "*/15 * * * 1-5", "@daily", "@hourly", "@weekly", "@every 6h", "@every 1m"} {
		_, err := parseSchedule(ok)
		NewWithT(t).Expect(err).NotTo(HaveOccurred(), "%q", ok)
	}
	for bad, msg := range map[string]string{
		"0 3 * *":     "expected exactly 5 fields",
		"61 * * * *":  "end of range (61) above maximum (59)",
		"@fortnight":  "unrecognized descriptor",
		"@every 30s":  "@every 30s is more often than once a minute",
		"* * * * * *": "expected exactly 5 fields",
	} {
		_, err := parseSchedule(bad)
		NewWithT(t).Expect(err).To(MatchError(ContainSubstring(msg)), "%q", bad)
	}
	// Times are UTC whatever the operator's local zone.
	sched, err := parseSchedule("0 3 * * *")
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	berlin := time.FixedZone("CET", 3600)
	NewWithT(t).Expect(sched.Next(time.Date(2026, 3, 1, 12, 0, 0, 0, berlin))).To(BeTemporally("==", utc("2026-03-02T03:00:00Z")))
}

func TestMostRecentSlot(t *testing.T) {
	cases := []struct {
		name       string
		schedule   string
		after, now string
		want       string // "" when no slot is due
	}{
		{"before the first slot", "0 3 * * *", "2026-03-01T10:00:00Z", "2026-03-02T02:59:59Z", ""},
		{"exactly at the slot", "0 3 * * *", "2026-03-01T10:00:00Z", "2026-03-02T03:00:00Z", "2026-03-02T03:00:00Z"},
		{"just after the slot", "0 3 * * *", "2026-03-01T10:00:00Z", "2026-03-02T03:00:42Z", "2026-03-02T03:00:00Z"},
		{"the slot itself is not due again", "0 3 * * *", "2026-03-02T03:00:00Z", "2026-03-02T23:00:00Z", ""},
		{"missed slots: only the latest", "0 3 * * *", "2026-03-01T10:00:00Z", "2026-03-05T04:00:00Z", "2026-03-05T03:00:00Z"},
		{"far behind on a frequent schedule", "*/5 * * * *", "2025-01-01T00:00:00Z", "2026-03-05T04:07:00Z", "2026-03-05T04:05:00Z"},
		{"irregular schedule far behind", "0 3 * * 1-5", "2025-01-01T00:00:00Z", "2026-03-08T12:00:00Z", "2026-03-06T03:00:00Z"}, // Sunday: Friday's
		{"every 6h counts from the cursor", "@every 6h", "2026-03-01T10:20:00Z", "2026-03-03T09:00:00Z", "2026-03-03T04:20:00Z"},
		{"every 6h before its first slot", "@every 6h", "2026-03-01T10:20:00Z", "2026-03-01T16:19:59Z", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			sched, err := parseSchedule(tc.schedule)
			g.Expect(err).NotTo(HaveOccurred())
			got, due := mostRecentSlot(sched, utc(tc.after), utc(tc.now))
			if tc.want == "" {
				g.Expect(due).To(BeFalse(), "got %s", got)
				return
			}
			g.Expect(due).To(BeTrue())
			g.Expect(got).To(Equal(utc(tc.want)))
		})
	}
}

func TestSlotSnapshotName(t *testing.T) {
	g := NewWithT(t)
	g.Expect(slotSnapshotName("support-bot", utc("2026-03-02T03:00:00Z"))).To(Equal("support-bot-202603020300"))
	// The name is the slot in UTC, whatever zone the time is in.
	g.Expect(slotSnapshotName("s", time.Date(2026, 3, 2, 4, 5, 59, 0, time.FixedZone("CET", 3600)))).To(Equal("s-202603020305"))
}

// finishedSnapshot is a scheduled snapshot for slot, finished with reason ("" while it
// still runs).
func finishedSnapshot(name, slot, reason string) memoryv1alpha1.MemorySnapshot {
	s := memoryv1alpha1.MemorySnapshot{ObjectMeta: metav1.ObjectMeta{Name: name,
		Annotations: map[string]string{memoryv1alpha1.AnnotationScheduledAt: slot}}}
	if reason != "" {
		s.SetCompleted(reason, "done")
	} else {
		s.SetProgress(metav1.ConditionTrue, memoryv1alpha1.ReasonRunning, "running")
	}
	return s
}

func victimNames(v []retentionVictim) map[string]string {
	out := map[string]string{}
	for _, x := range v {
		out[x.snap.Name] = x.reason
	}
	return out
}

func TestRetentionVictims(t *testing.T) {
	now := utc("2026-03-10T12:00:00Z")
	day := 24 * time.Hour
	snaps := func() []memoryv1alpha1.MemorySnapshot {
		return []memoryv1alpha1.MemorySnapshot{
			finishedSnapshot("s-10", "2026-03-10T03:00:00Z", ""), // running: never removed
			finishedSnapshot("s-09", "2026-03-09T03:00:00Z", memoryv1alpha1.ReasonFailed),
			finishedSnapshot("s-08", "2026-03-08T03:00:00Z", memoryv1alpha1.ReasonFailed),
			finishedSnapshot("s-07", "2026-03-07T03:00:00Z", memoryv1alpha1.ReasonSucceeded),
			finishedSnapshot("s-05", "2026-03-05T03:00:00Z", memoryv1alpha1.ReasonSucceeded),
			finishedSnapshot("s-01", "2026-03-01T03:00:00Z", memoryv1alpha1.ReasonSucceeded),
		}
	}

	g := NewWithT(t)
	v, next := retentionVictims(snaps(), 3, nil, now)
	g.Expect(victimNames(v)).To(Equal(map[string]string{"s-05": "beyond keepLast 3", "s-01": "beyond keepLast 3"}))
	g.Expect(next.IsZero()).To(BeTrue())

	// keepLast counts finished snapshots, but never removes the newest successful one.
	v, _ = retentionVictims(snaps(), 2, nil, now)
	g.Expect(victimNames(v)).To(Equal(map[string]string{"s-05": "beyond keepLast 2", "s-01": "beyond keepLast 2"}))

	maxAge := 4 * day
	v, next = retentionVictims(snaps(), 7, &maxAge, now)
	g.Expect(victimNames(v)).To(Equal(map[string]string{"s-05": "older than maxAge 96h0m0s", "s-01": "older than maxAge 96h0m0s"}))
	g.Expect(next).To(Equal(utc("2026-03-11T03:00:00Z")), "s-07 is next to pass maxAge")

	// Exactly maxAge old is not older than maxAge.
	v, _ = retentionVictims(snaps(), 7, &maxAge, utc("2026-03-11T03:00:00Z"))
	g.Expect(victimNames(v)).NotTo(HaveKey("s-07"))
}
