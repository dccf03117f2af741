package pgindex

// InsertsMet reports whether a COPY of new entries met existing rows (insertNew).
func InsertsMet(ix *Index) bool { return ix.insertsMet.Load() }
