package memory

import (
	"math"
	"time"
)

// HalfLives maps a memory type to the age at which its score has halved. A type that
// is missing, or has a half-life <= 0, does not decay.
type HalfLives map[Type]time.Duration

// DefaultHalfLives returns the default half-lives: working memory fades within hours,
// episodes within a month, facts and procedures over months to a year.
func DefaultHalfLives() HalfLives {
	return HalfLives{
		Working:    6 * time.Hour,
		Episodic:   30 * 24 * time.Hour,
		Semantic:   180 * 24 * time.Hour,
		Procedural: 365 * 24 * time.Hour,
	}
}

// EffectiveScore is base * 0.5^(age/halfLife). A negative age (a clock ahead of now)
// counts as zero, and a halfLife <= 0 means no decay.
func EffectiveScore(base float64, age, halfLife time.Duration) float64 {
	if halfLife <= 0 {
		return base
	}
	if age < 0 {
		age = 0
	}
	return base * math.Pow(0.5, age.Seconds()/halfLife.Seconds())
}

// Score returns the item's effective score at now.
//
// Age is measured from UpdatedAt, falling back to CreatedAt when UpdatedAt is unset:
// a memory that was re-stated or superseded is as fresh as its latest value, and the
// value being scored is the one written at UpdatedAt. The PostgreSQL store ranks
// recall with the same rule.
func (h HalfLives) Score(item Item, now time.Time) float64 {
	from := item.UpdatedAt
	if from.IsZero() {
		from = item.CreatedAt
	}
	return EffectiveScore(item.BaseScore, now.Sub(from), h[item.MemoryType])
}
