package service

// SetAfterRead makes s run f between each promotion's read of the turns and its write.
func SetAfterRead(s *Sessions, f func()) { s.afterRead = f }

// SetBeforeLocks makes m run f after each batch's early near-duplicate search and
// before the batch takes its locks.
func SetBeforeLocks(m *Memory, f func()) { m.beforeLocks = f }
