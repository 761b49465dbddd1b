package v1alpha1

import (
	"testing"
	"time"
)

// The schedule the scheduler runs: time zones, daylight-saving gaps and
// repeats, descriptors.
func TestParseSchedule(t *testing.T) {
	berlin, _ := time.LoadLocation("Europe/Berlin")
	ny, _ := time.LoadLocation("America/New_York")
	tests := []struct {
		name, schedule, zone string
		after                time.Time
		want                 []time.Time // the next fires, in order
	}{
		{"five fields in UTC", "*/15 * * * *", "", time.Date(2026, 12, 3, 10, 7, 0, 0, time.UTC),
			[]time.Time{time.Date(2026, 12, 3, 10, 15, 0, 0, time.UTC), time.Date(2026, 12, 3, 10, 30, 0, 0, time.UTC)}},
		{"the zone's 09:00", "0 9 * * *", "America/New_York", time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC),
			[]time.Time{time.Date(2026, 12, 3, 9, 0, 0, 0, ny), time.Date(2026, 12, 4, 9, 0, 0, 0, ny)}},
		// 2026-03-29 02:30 does not exist in Berlin: the clocks jump from 02:00 to 03:00.
		{"a time in the spring gap", "30 2 * * *", "Europe/Berlin", time.Date(2026, 3, 28, 12, 0, 0, 0, berlin),
			[]time.Time{time.Date(2026, 3, 30, 2, 30, 0, 0, berlin)}},
		// 2026-10-25 02:30 happens twice in Berlin: it fires once, the first
		// time (CEST, UTC+2).
		{"a time in the autumn repeat", "30 2 * * *", "Europe/Berlin", time.Date(2026, 10, 24, 12, 0, 0, 0, berlin),
			[]time.Time{time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), time.Date(2026, 10, 26, 2, 30, 0, 0, berlin)}},
		{"hourly across the repeat", "30 * * * *", "Europe/Berlin", time.Date(2026, 10, 25, 0, 0, 0, 0, time.UTC),
			[]time.Time{time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), time.Date(2026, 10, 25, 2, 30, 0, 0, time.UTC)}},
		{"@every", "@every 90s", "", time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC),
			[]time.Time{time.Date(2026, 12, 3, 10, 1, 30, 0, time.UTC), time.Date(2026, 12, 3, 10, 3, 0, 0, time.UTC)}},
		{"@hourly in a zone", "@hourly", "Asia/Kolkata", time.Date(2026, 12, 3, 10, 10, 0, 0, time.UTC),
			[]time.Time{time.Date(2026, 12, 3, 10, 30, 0, 0, time.UTC)}}, // Kolkata is UTC+5:30
	}
	for _, tt := range tests {
		s, loc, err := (&CronTrigger{Schedule: tt.schedule, Timezone: tt.zone}).ParseSchedule()
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		at := tt.after
		for i, want := range tt.want {
			at = s.Next(at.In(loc))
			if !at.Equal(want) {
				t.Errorf("%s: fire %d at %v, want %v", tt.name, i, at, want)
			}
		}
	}
	if _, _, err := (&CronTrigger{Schedule: "* * *", Timezone: "UTC"}).ParseSchedule(); err == nil {
		t.Error("a three-field schedule parsed")
	}
}
