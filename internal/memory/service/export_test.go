package service

// SetAfterRead makes s run f between each promotion's read of the turns and its write.
func SetAfterRead(s *Sessions, f func()) { s.afterRead = f }
